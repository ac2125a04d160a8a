#include "tools/jitdump_linear.hpp"

#include <asmjit/core.h>

#include <memory>
#include <string>
#include <vector>

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::tools {
namespace {

using jit::GemmKey;
using jit::Isa;

constexpr const char* kKeyFormat =
    "gemm.<isa>.<mr>x<nc>.k<K>[.<quant>][.bias][.<act>][.scale][.tab][.pf<N>][.ks<S>][.dot], e.g. "
    "gemm.avx512.8x48.k768.bias.gelu or gemm.avx2.4x16.k768.qd8qc8w.bias";

/// The flags as CLI11 parsed them; turned into a GemmKey by make_key().
struct GemmFlags {
  std::string key;
  std::string isa;  // empty: default_isa()
  int64_t k = 0;
  int nc = 0;       // 0: three vectors of the ISA
  int mr = 0;       // 0: the most rows the register budget allows
  bool bias = false;
  std::string act = "none";
  bool scale = false;
  std::string store = "row-major";
  int prefetch = 0;
  int k_split = 1;
  std::string quant = "f32";
  bool dot = false;
  DumpOptions dump;
  std::vector<const CLI::Option*> key_flags;  // the flags --key replaces, to reject mixing them
};

Activation activation_from(const std::string& s) {
  if (s == "relu") return Activation::kRelu;
  if (s == "gelu") return Activation::kGelu;
  if (s == "gelu_tanh") return Activation::kGeluTanh;
  if (s == "silu") return Activation::kSilu;
  return Activation::kNone;
}

jit::GemmQuant quant_from(const std::string& s) {
  if (s == "qd8-qc8w") return jit::GemmQuant::kQd8Qc8w;
  if (s == "qd8-qc4w") return jit::GemmQuant::kQd8Qc4w;
  if (s == "f32-qc8w") return jit::GemmQuant::kF32Qc8w;
  if (s == "f32-qc4w") return jit::GemmQuant::kF32Qc4w;
  return jit::GemmQuant::kF32;
}

// The register budget is the generator's rule (gemm_max_mr); checking it here turns a tile that
// cannot fit into a usage error that says why. `rows_flag` is blamed for too many rows,
// `columns_flag` for columns that leave room for no row at all. An ISA without a GEMM generator
// has no budget: the generator says so itself.
void check_tile(const GemmKey& key, const std::string& rows_flag, const std::string& columns_flag) {
  if (!jit::isa_traits(key.isa).gemm_generator) return;
  const int max_mr = jit::gemm_max_mr(key.isa, key.nv(), key.quant, key.dot);
  const std::string tile = "a " + std::to_string(key.nc) + "-column tile (" + std::to_string(key.nv()) + " vectors)";
  const std::string isa(jit::isa_name(key.isa));
  if (max_mr < 1)
    throw UsageError(columns_flag + ": " + tile + " leaves registers for no row on " + isa + "; use fewer columns");
  if (key.mr <= max_mr) return;
  throw UsageError(rows_flag + ": " + std::to_string(key.mr) + " rows do not fit: " + tile +
                   " leaves registers for at most " + std::to_string(max_mr) + " rows on " + isa);
}

GemmKey make_key(const GemmFlags& f) {
  if (!f.key.empty()) {
    const auto parsed = jit::parse_gemm_key(f.key);
    if (!parsed) throw UsageError("--key: " + f.key + " is not a canonical kernel name (" + kKeyFormat + ")");
    for (const CLI::Option* o : f.key_flags)
      if (o->count() > 0)
        throw UsageError("--key: the name already fixes every kernel flag; drop " + o->get_name() +
                         " or drop --key");
    check_tile(*parsed, "--key", "--key");
    return *parsed;
  }
  if (f.k == 0) throw UsageError("linear-group: give --k K (with --nc, --mr, --bias, ...) or --key NAME");
  GemmKey key;
  key.isa = f.isa.empty() ? default_isa() : *jit::parse_isa(f.isa);
  key.k = f.k;
  key.nc = f.nc > 0 ? f.nc : int(3 * key.lanes());
  key.quant = quant_from(f.quant);
  key.dot = f.dot;
  key.mr = f.mr > 0 ? f.mr : jit::gemm_max_mr(key.isa, key.nv(), key.quant, key.dot);  // 0 (no row fits) is rejected below
  key.bias = f.bias;
  key.act = activation_from(f.act);
  key.scale = f.scale;
  key.store = f.store == "table" ? jit::GemmStore::kTable : jit::GemmStore::kRowMajor;
  key.prefetch = f.prefetch;
  key.k_split = f.k_split;
  check_tile(key, "--mr", f.nc > 0 ? "--nc" : "--isa");
  return key;
}

void run(const GemmFlags& flags) {
  const GemmKey key = make_key(flags);
  const KernelSource kernel = kernel_source(key, jit::emit_gemm_kernel, jit::generate_gemm_kernel);
  dump_kernel(kernel, flags.dump);
}

}  // namespace

Command add_linear_group_command(CLI::App& parent) {
  auto flags = std::make_shared<GemmFlags>();
  CLI::App* app = parent.add_subcommand(
      "linear-group",
      "Generate one linear-group microkernel (an mr x nc register tile of Y = act(X W^T + bias) * scale "
      "over packed weight panels) and print its canonical name, ISA, code size, compile time and "
      "assembly listing with machine bytes.");
  app->footer(
      "\nExamples:\n"
      "  jitdump linear-group --k 768 --bias                  (8x48 on avx512)\n"
      "  jitdump linear-group --k 16 --nc 16 --mr 5 --bias --scale --store table --isa avx2\n"
      "  jitdump linear-group --key gemm.avx512.8x48.k768.bias.gelu\n"
      "  jitdump linear-group --k 768 --nc 16 --quant qd8-qc8w --bias --isa avx2   (4x16)");

  app->add_option("--key", flags->key, std::string("A microkernel's canonical name instead of the flags below: ") +
                                           kKeyFormat);
  std::vector<CLI::Option*> shape;
  shape.push_back(app->add_option("--isa", flags->isa, isa_help())->check(isa_choice()));
  shape.push_back(app->add_option("--k", flags->k, "Reduction length K, the columns of X (required without --key)")
                      ->check(int_in(1, 1 << 24)));
  shape.push_back(app->add_option("--nc", flags->nc,
                                  "Columns of the tile, i.e. of one packed panel (default three vectors: "
                                  "48 on avx512, 24 on avx2)")
                      ->check(int_in(1, 4096)));
  shape.push_back(app->add_option("--mr", flags->mr,
                                  "Rows of X per call (default: the most the register budget allows for --nc)")
                      ->check(int_in(1, 64)));
  shape.push_back(app->add_flag("--bias", flags->bias, "The panel carries a bias row, added before the activation"));
  shape.push_back(app->add_option("--act", flags->act, "Activation after the bias (default none)")
                      ->check(one_of({"none", "relu", "gelu", "gelu_tanh", "silu"})));
  shape.push_back(app->add_flag("--scale", flags->scale, "Multiply by a run-time scale after the activation"));
  shape.push_back(app->add_option("--store", flags->store,
                                  "Output addressing: row-major rows ldc apart, or table (row and column offset "
                                  "tables, for head-split layouts); default row-major")
                      ->check(one_of({"row-major", "table"})));
  shape.push_back(app->add_option("--prefetch", flags->prefetch,
                                  "Software prefetch of the weight stream, in bytes ahead; 0 = none (default)")
                      ->check(int_in(0, 1 << 20)));
  shape.push_back(app->add_option("--k-split", flags->k_split,
                                  "Read K in this many spans side by side, each its own partial sum (weight streams "
                                  "of a streamed decode part); 1 = one stream (default)")
                      ->check(int_in(1, 8)));
  shape.push_back(app->add_option("--quant", flags->quant,
                                  "Operand form (docs/quantized-linear-semantics.md): f32 (default), qd8-qc8w, "
                                  "qd8-qc4w (int8 input, int8/int4 weights), f32-qc8w, f32-qc4w (weight-only)")
                      ->check(one_of({"f32", "qd8-qc8w", "qd8-qc4w", "f32-qc8w", "f32-qc4w"})));
  shape.push_back(app->add_flag("--dot", flags->dot,
                                "qd8 forms: the ISA's 4-way int8 dot product (AVX-512 VNNI vpdpbusd) instead of "
                                "widening to 16 bits"));
  flags->key_flags.assign(shape.begin(), shape.end());

  add_dump_options(*app, flags->dump);
  return {app, [flags] { run(*flags); }};
}

}  // namespace shapejit::tools
