#include "tools/jitdump_embag.hpp"

#include <asmjit/core.h>

#include <memory>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "jit/embag_kernel.hpp"
#include "jit/embag_plan.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::tools {
namespace {

using jit::EmbagKey;
using jit::Isa;

constexpr const char* kKeyFormat =
    "embag.<isa>.<table>.d<D>.<mode>.i<32|64>.o<32|64>[.w[<psw>]][.pad][.aten][.pruned][.out<dtype>][.pf<N>]"
    "[.head][.noidx], "
    "e.g. embag.avx512.f32.d128.sum.i64.o64 or embag.avx2.q4.d128.max.i32.o32.outbf16";

/// The flags as CLI11 parsed them; turned into an EmbagKey by make_key().
struct EmbagFlags {
  std::string key;
  int64_t dim = 0;
  std::string mode = "sum";
  std::string index = "i64";
  std::string offset = "i64";
  std::string table = "f32";
  std::string out;  // empty: the table's default (jit::default_value_dtype)
  std::string psw;  // empty: the table's default
  std::string isa;  // empty: default_isa()
  bool weighted = false;
  bool padding = false;
  bool aten_loop = false;
  bool pruned = false;
  int prefetch = 16;
  bool prefetch_head = false;
  bool no_index_outputs = false;
  int64_t out_stride = 0;
  DumpOptions dump;
  std::vector<const CLI::Option*> key_flags;  // the flags --key replaces, to reject mixing them
};

Mode mode_from(const std::string& s) {
  return s == "mean" ? Mode::kMean : s == "max" ? Mode::kMax : Mode::kSum;
}

DType table_from(const std::string& s) {
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  if (s == "q8") return DType::kQ8;
  if (s == "q4") return DType::kQ4;
  if (s == "q2") return DType::kQ2;
  return DType::kF32;
}

// --out / --psw: a float dtype, or the table's default when not given.
DType value_from(const std::string& s, DType table) {
  return s.empty() ? jit::default_value_dtype(table) : table_from(s);
}

DType int_from(const std::string& s) { return s == "i32" ? DType::kI32 : DType::kI64; }

const char* mode_text(Mode m) {
  return m == Mode::kMean ? "mean" : m == Mode::kMax ? "max" : "sum";
}

// The generators' own key rule (jit/embag_plan.hpp), applied to flags and --key alike, so
// --dim accepts exactly the widths a d<D> in a key may have.
void require_generated(const EmbagKey& key, const std::string& what) {
  if (const auto why = jit::embag_key_unsupported_reason(key))
    throw UsageError(what + ": no generator takes this kernel: " + *why);
}

// Flags were checked one by one by CLI11; here the rules that span several of them.
EmbagKey make_key(const EmbagFlags& f) {
  EmbagKey key;
  if (!f.key.empty()) {
    const auto parsed = jit::parse_embag_key(f.key);
    if (!parsed)
      throw UsageError("--key: " + f.key + " is not a canonical kernel name (" + kKeyFormat + ")");
    for (const CLI::Option* o : f.key_flags)
      if (o->count() > 0)
        throw UsageError("--key: the name already fixes every kernel flag; drop " + o->get_name() +
                         " or drop --key");
    key = *parsed;
    if (key.weighted && key.mode != Mode::kSum)
      throw UsageError("--key: " + f.key + " is weighted (.w) in " + mode_text(key.mode) +
                       " mode; per-sample weights are only allowed in sum mode");
    require_generated(key, "--key: " + f.key);
    return key;
  }
  if (f.dim == 0)
    throw UsageError("embedding-bag: give --dim D (with --mode, --index, ...) or --key NAME");
  if (f.weighted && f.mode != "sum")
    throw UsageError("--weighted: per-sample weights are only allowed with --mode sum, not --mode " + f.mode);
  key.isa = f.isa.empty() ? default_isa() : *jit::parse_isa(f.isa);
  key.table = table_from(f.table);
  key.out = value_from(f.out, key.table);
  key.psw = value_from(f.psw, key.table);
  key.pruned = f.pruned;
  key.dim = f.dim;
  key.mode = mode_from(f.mode);
  key.weighted = f.weighted;
  key.padding = f.padding;
  if (f.aten_loop && f.padding)
    throw UsageError("--aten-loop: padding_idx (--padding) implies ATen's loop; give one of them");
  if (f.aten_loop && !EmbagKey::aten_loop_changes(key.table, key.weighted))
    throw UsageError("--aten-loop: ATen's loop changes only weighted f32 sums and bf16 tables");
  key.aten_loop = f.aten_loop;
  key.index = int_from(f.index);
  key.offset = int_from(f.offset);
  key.prefetch = f.prefetch;
  key.prefetch_head = f.prefetch_head;
  key.index_outputs = !f.no_index_outputs;
  key.out_stride = f.out_stride == f.dim ? 0 : f.out_stride;  // a stride of D is dense rows
  require_generated(key, "embedding-bag: " + key.name());
  return key;
}

void run(const EmbagFlags& flags) {
  const EmbagKey key = make_key(flags);
  const KernelSource kernel = kernel_source(key, jit::emit_embag_kernel, jit::generate_embag_kernel);
  dump_kernel(kernel, flags.dump);
}

}  // namespace

Command add_embedding_bag_command(CLI::App& parent) {
  auto flags = std::make_shared<EmbagFlags>();
  CLI::App* app = parent.add_subcommand(
      "embedding-bag",
      "Generate the embedding-bag kernel of one key and print its canonical name, ISA, code size, "
      "compile time and assembly listing with machine bytes.");
  app->footer(
      "\nExamples:\n"
      "  jitdump embedding-bag --dim 128 --mode max --index i64 --offset i64\n"
      "  jitdump embedding-bag --dim 20 --isa avx2 --weighted --prefetch 8\n"
      "  jitdump embedding-bag --dim 64 --isa neon             (cross-emits AArch64 code on x86-64)\n"
      "  jitdump embedding-bag --dim 128 --table q4 --mode max --isa avx2\n"
      "  jitdump embedding-bag --key embag.avx512.f32.d128.sum.i64.o64");

  app->add_option("--key", flags->key,
                                     std::string("A kernel's canonical name instead of the flags below: ") +
                                         kKeyFormat);
  std::vector<CLI::Option*> shape;
  shape.push_back(app->add_option("--dim,-d", flags->dim, "Row width D, the number of columns, 1 to " +
                                      std::to_string(jit::kMaxGeneratedEmbagDim) + " (required without --key)")
                      ->check(positive_int()));
  shape.push_back(app->add_option("--mode,-m", flags->mode, "Reduction over a bag's rows (default sum)")
                      ->check(one_of({"sum", "mean", "max"})));
  shape.push_back(app->add_option("--index", flags->index, "Element type of indices (default i64)")
                      ->check(one_of({"i32", "i64"})));
  shape.push_back(app->add_option("--offset", flags->offset, "Element type of offsets (default i64)")
                      ->check(one_of({"i32", "i64"})));
  shape.push_back(app->add_option("--table", flags->table,
                                  "Element type of the table; q8/q4/q2 are rowwise-quantized rows (default f32)")
                      ->check(one_of({"f32", "f16", "bf16", "q8", "q4", "q2"})));
  shape.push_back(app->add_option("--out", flags->out,
                                  "Element type of the output (default: the table's; f32 for quantized tables)")
                      ->check(one_of({"f32", "f16", "bf16"})));
  shape.push_back(app->add_option("--psw", flags->psw,
                                  "Element type of per_sample_weights (default: as --out's default)")
                      ->check(one_of({"f32", "f16", "bf16"})));
  shape.push_back(app->add_flag("--pruned", flags->pruned,
                                "compressed_indices_mapping present: each index reads the row the mapping names"));
  shape.push_back(app->add_flag("--weighted,-w", flags->weighted,
                                "per_sample_weights present: rows are scaled before summing (sum mode only)"));
  shape.push_back(app->add_flag("--padding,-p", flags->padding,
                                "padding_idx present: the kernel skips rows equal to it, as ATen does"));
  shape.push_back(app->add_flag("--aten-loop", flags->aten_loop,
                                "ATen's own loop's arithmetic without padding_idx (aten_loop_arithmetic): weighted "
                                "products rounded first; bf16 sums to nearest even"));
  shape.push_back(app->add_option("--isa", flags->isa, isa_help())->check(isa_choice()));
  shape.push_back(app->add_option("--prefetch", flags->prefetch,
                                  "Software prefetch distance in indices; 0 turns prefetching off (default 16)")
                      ->check(int_in(0, 1 << 20)));
  shape.push_back(app->add_flag("--prefetch-head", flags->prefetch_head,
                                "Prefetch only the head of each row (f32 rows; the engine's choice on AVX2 but for max with index outputs, "
                                "and on AVX-512 for a table within half of L3)"));
  shape.push_back(app->add_flag("--no-index-outputs", flags->no_index_outputs,
                                "Compute the output only (skip_index_outputs): no offset2bag, bag_size or max_indices, "
                                "and max keeps no row ids"));
  shape.push_back(app->add_option("--out-stride", flags->out_stride,
                                  "Elements between output rows (output_row_stride), more than --dim; default: dense rows")
                      ->check(CLI::Range(int64_t{0}, jit::kMaxGeneratedEmbagDim)));
  flags->key_flags.assign(shape.begin(), shape.end());

  add_dump_options(*app, flags->dump);
  return {app, [flags] { run(*flags); }};
}

}  // namespace shapejit::tools
