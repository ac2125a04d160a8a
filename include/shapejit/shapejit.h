/* shapejit C ABI: JIT-generated embedding bags and linear groups.
 *
 * Every function returns a status; on failure shapejit_last_error() returns the calling
 * thread's last message (argument, value and rule). A failed call leaves every output
 * buffer exactly as it was. All buffers are dense and row-major unless a stride says
 * otherwise. The exact semantics are those of ATen's _embedding_bag, written down in
 * docs/embedding-bag-semantics.md (linear groups: docs/split-gemm-semantics.md).
 *
 * Alignment: every buffer a call reads or writes must be aligned to its element size (4 bytes
 * for float32 and int32, 8 for int64, 2 for float16 and bfloat16); a misaligned one is rejected
 * with SHAPEJIT_INVALID_ARGUMENT naming it, its address and the alignment. A zero-length buffer
 * is never touched and may have any address (or be NULL).
 * Enum fields: any int may be stored in one; a value outside the enum is rejected and reported
 * as that int.
 *
 * ABI: how this interface grows without breaking programs built against an older header.
 * - The library's file name carries the major version (SONAME libshapejit.so.MAJOR). Within one
 *   major version the C ABI only grows: functions are added, never removed or changed.
 * - Structs the library fills or reads are never reordered; new fields are appended at the end.
 *   A struct that grows carries its size: either a `struct_size` first field that the caller sets
 *   to sizeof (shapejit_embedding_bag_ex_args, with its _init function), or a `_sized` function
 *   taking the caller's sizeof (shapejit_get_kernel_cache_stats_sized). The library then reads
 *   and writes only the fields that size covers; fields an older caller lacks take their defaults.
 *   Structs without either (shapejit_embedding_bag_args, the linear-group descriptors) are frozen:
 *   new options arrive in a new struct that embeds them, as the _ex call does.
 * - Enums only gain values; an existing value never changes meaning.
 * - shapejit_version() is the library's SHAPEJIT_VERSION: compare it with the header's to detect
 *   an older library at run time.
 * - The C++ API (shapejit.hpp) is a layer over this ABI whose structs may grow in place: rebuild
 *   C++ programs for each new minor version (the CMake package accepts only the same minor). */
#ifndef SHAPEJIT_SHAPEJIT_H
#define SHAPEJIT_SHAPEJIT_H

#include <stddef.h>
#include <stdint.h>

#include "shapejit/version.h"

#if defined(_WIN32)
#define SHAPEJIT_API __declspec(dllexport)
#else
#define SHAPEJIT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SHAPEJIT_OK = 0, SHAPEJIT_INVALID_ARGUMENT = 1, SHAPEJIT_UNSUPPORTED = 2,
               SHAPEJIT_OUT_OF_MEMORY = 3, SHAPEJIT_INTERNAL_ERROR = 4 } shapejit_status;
/* SHAPEJIT_Q8/Q4/Q2 are rowwise-quantized table rows (docs/quantized-tables-semantics.md): per
 * row D codes of 8/4/2 bits, then the row's scale and bias (f32 for Q8, f16 for Q4/Q2), exactly
 * as torch's embedding_bag_{byte,4bit,2bit}_prepack lays them out. They are table dtypes only. */
typedef enum { SHAPEJIT_F32 = 0, SHAPEJIT_F16 = 1, SHAPEJIT_BF16 = 2,
               SHAPEJIT_I32 = 3, SHAPEJIT_I64 = 4,
               SHAPEJIT_Q8 = 5, SHAPEJIT_Q4 = 6, SHAPEJIT_Q2 = 7 } shapejit_dtype;
typedef enum { SHAPEJIT_SUM = 0, SHAPEJIT_MEAN = 1, SHAPEJIT_MAX = 2 } shapejit_mode;

/* One embedding-bag call. weight is [num_rows, dim] with rows row_stride elements apart
 * (row_stride >= dim). indices [num_indices] and offsets [num_offsets] are int32 or int64;
 * if the two differ both are promoted to int64.
 * Table dtypes: F32, F16 and BF16 (output and per_sample_weights of the table's dtype), or
 * Q8/Q4/Q2 (output and per_sample_weights f32; `dim` is D, the values per row, even for Q4 and a
 * multiple of 4 for Q2, and row_stride counts bytes: >= the packed row's D + 8, D/2 + 4 or D/4 + 4
 * bytes; quantized rows need no alignment). Other output
 * and weight dtypes, pruned tables and ATen's lengths-style offsets: shapejit_embedding_bag_ex. */
typedef struct {
  const void* weight; shapejit_dtype weight_dtype; int64_t num_rows; int64_t dim; int64_t row_stride;
  const void* indices; shapejit_dtype index_dtype; int64_t num_indices;
  const void* offsets; shapejit_dtype offset_dtype; int64_t num_offsets;
  const void* per_sample_weights;            /* NULL, or num_indices weights (F32 for quantized tables) */
  shapejit_mode mode;
  int32_t has_padding_idx; int64_t padding_idx;
  int32_t include_last_offset;
  int32_t aten_partial_final_offset;         /* see docs/embedding-bag-semantics.md */
} shapejit_embedding_bag_args;

/* Output shapes of a call, so callers can allocate them. */
typedef struct {
  int64_t output_rows, output_cols;          /* output_rows x output_cols of the output dtype */
  shapejit_dtype index_out_dtype;            /* dtype of offset2bag, bag_size, max_indices */
  int64_t offset2bag_len, bag_size_len, max_indices_rows, max_indices_cols;
} shapejit_embedding_bag_shapes;

SHAPEJIT_API shapejit_status shapejit_embedding_bag_output_shapes(const shapejit_embedding_bag_args*,
                                                                  shapejit_embedding_bag_shapes*);
/* Writes all four ATen outputs. A zero-length output may be passed as NULL. No output may share
 * a byte with another output or with an input: indices, offsets, per_sample_weights, or the
 * weight table from the start of its first row to the end of its last (the gaps of a strided
 * table included); such a call is rejected before anything is written. */
SHAPEJIT_API shapejit_status shapejit_embedding_bag(const shapejit_embedding_bag_args*, void* output,
                                                    void* offset2bag, void* bag_size, void* max_indices);
/* ---- Embedding bags, extended form: every table dtype's options ---------------------------
 * `call` as above, plus what only some table dtypes allow. Set struct_size to
 * sizeof(shapejit_embedding_bag_ex_args): later versions append fields and read only what the
 * caller's struct_size covers. */
typedef struct {
  size_t struct_size;
  shapejit_embedding_bag_args call;
  /* F32 for f32 tables; the table's dtype for F16/BF16 tables; F32, F16 or BF16 for quantized
   * tables (the f32 result rounded once to nearest even). */
  shapejit_dtype output_dtype;
  /* dtype of per_sample_weights: the table's for F32/F16/BF16; F32 for Q8; F32 or F16 for Q4/Q2. */
  shapejit_dtype per_sample_weights_dtype;
  /* Pruned quantized tables (NULL: not pruned): index i, 0 <= i < mapping_len, reads row
   * compressed_indices_mapping[i]; -1 skips the position (not summed, not counted). padding_idx
   * and max_indices refer to the index as given. */
  const int32_t* compressed_indices_mapping;
  int64_t mapping_len;
  /* ATen's quantized rowwise ops: bag b is the next offsets[b+1] - offsets[b] positions (a
   * negative length is an empty bag), offsets[0] need not be 0, and with include_last_offset
   * positions past the last bag are ignored. 0: the f32 rules (spans, validated). */
  int32_t offsets_as_lengths;
  /* Nonzero: only `output` is computed (inference: ATen's forward needs offset2bag, bag_size
   * and max_indices for backward only). The output shapes then give those three 0 elements;
   * they may be NULL and are never written. The output is bitwise the same as without it, and
   * max and mean skip the id and count work (docs/embedding-bag-semantics.md). */
  int32_t skip_index_outputs;
  /* Elements from one output row to the next; 0 means dense (output_cols). Nonzero: at least
   * output_cols, and output then spans (output_rows - 1) * output_row_stride + output_cols
   * elements (none when either is 0), of which only the rows' output_cols are written (the gaps are left as they are).
   * Writing calls into column slices of one [B, sum of D] buffer concatenates their outputs
   * (torch.cat(..., dim=1) without the copy); see docs/embedding-bag-semantics.md. */
  int64_t output_row_stride;
  /* Nonzero: the arithmetic of ATen's own embedding-bag loop, which torch runs with padding_idx
   * (which implies this) and also for a column-strided table or strided per_sample_weights:
   * f32 and bf16 tables round each weighted product to f32 before adding it, and bf16 tables
   * round their sums to nearest even (docs/embedding-bag-semantics.md, rule 2; H6). 0: the
   * arithmetic of torch's FBGEMM path. Other tables: no effect. */
  int32_t aten_loop_arithmetic;
} shapejit_embedding_bag_ex_args;

/* The defaults that make an ex call equal to shapejit_embedding_bag(call): struct_size set,
 * output and weight dtypes from the table's (F32 for quantized tables), nothing pruned, offsets
 * as spans, index outputs computed, dense output rows. */
SHAPEJIT_API void shapejit_embedding_bag_ex_init(shapejit_embedding_bag_ex_args* args,
                                                 const shapejit_embedding_bag_args* call);
SHAPEJIT_API shapejit_status shapejit_embedding_bag_ex_output_shapes(const shapejit_embedding_bag_ex_args*,
                                                                     shapejit_embedding_bag_shapes*);
/* As shapejit_embedding_bag; output is of output_dtype. */
SHAPEJIT_API shapejit_status shapejit_embedding_bag_ex(const shapejit_embedding_bag_ex_args*, void* output,
                                                       void* offset2bag, void* bag_size, void* max_indices);

/* ---- A prepared embedding bag: one call form, many batches ---------------------------------
 * For a caller that runs the same lookup again and again on new indices (a model's table, batch
 * after batch): shapejit_embedding_bag_prepare validates everything but the batch once and binds
 * the kernel; each run then checks only what the batch brings (its counts and buffers, every
 * offset and index, the outputs). A run gives bitwise the outputs, and the status and message,
 * of shapejit_embedding_bag_ex on the form with the batch's five fields put in.
 *
 * The form is an ex struct (struct_size as for shapejit_embedding_bag_ex) whose call.indices,
 * num_indices, offsets and num_offsets are not read; call.per_sample_weights only says whether
 * the batches carry weights (any non-NULL pointer: yes). The table, its dtype and sizes and every
 * other field are the form's: a table that moves needs a new prepared call. A prepared call is
 * immutable: any number of threads may run it at once. */
typedef struct shapejit_embedding_bag_prepared shapejit_embedding_bag_prepared;
typedef struct {
  const void* indices; int64_t num_indices;  /* of the form's index_dtype */
  const void* offsets; int64_t num_offsets;  /* of the form's offset_dtype */
  /* num_indices weights of the form's dtype when the form has weights (NULL allowed only when
   * num_indices is 0), else NULL. */
  const void* per_sample_weights;
} shapejit_embedding_bag_batch;

/* Validates the form and binds its kernel (compiling it if needed) and sets *out; on failure
 * *out is unchanged. */
SHAPEJIT_API shapejit_status shapejit_embedding_bag_prepare(const shapejit_embedding_bag_ex_args* form,
                                                            shapejit_embedding_bag_prepared** out);
/* The output shapes of a batch, as shapejit_embedding_bag_ex_output_shapes of the whole call. */
SHAPEJIT_API shapejit_status shapejit_embedding_bag_prepared_output_shapes(
    const shapejit_embedding_bag_prepared* prepared, const shapejit_embedding_bag_batch* batch,
    shapejit_embedding_bag_shapes* shapes);
/* Runs a batch; the output rules of shapejit_embedding_bag_ex (the table counts as an input). */
SHAPEJIT_API shapejit_status shapejit_embedding_bag_prepared_run(const shapejit_embedding_bag_prepared* prepared,
                                                                 const shapejit_embedding_bag_batch* batch,
                                                                 void* output, void* offset2bag, void* bag_size,
                                                                 void* max_indices);
/* Frees a prepared call (NULL is a no-op). */
SHAPEJIT_API shapejit_status shapejit_embedding_bag_prepared_destroy(shapejit_embedding_bag_prepared* prepared);

/* ---- Many embedding bags in one call: a model's tables -------------------------------------
 * Runs count calls as one: one pass of validation over all of them, then all their bags in one
 * parallel region, partitioned by work across the calls. calls[k] points to an ex struct (each
 * with its own struct_size, set it as for shapejit_embedding_bag_ex) and outputs[k] holds its
 * buffers, sized by shapejit_embedding_bag_ex_output_shapes(calls[k]). Every call is validated
 * and every index checked before any output of any call is written: on failure no output is
 * touched and the error names the call ("embedding_bags: calls[k]: ..."). The buffer rule holds
 * across the calls: no output may share a byte with an input or an output of any call (inputs may
 * be shared, e.g. two calls reading one table). Each call's outputs are bitwise those of the
 * call made alone. count 0 does nothing; calls and outputs may then be NULL. */
typedef struct {
  void* output; void* offset2bag; void* bag_size; void* max_indices;
} shapejit_embedding_bag_outputs;

SHAPEJIT_API shapejit_status shapejit_embedding_bags(const shapejit_embedding_bag_ex_args* const* calls,
                                                     const shapejit_embedding_bag_outputs* outputs, int64_t count);

/* ---- Rowwise quantization: torch's embedding_bag_{byte,4bit,2bit}_prepack and _unpack ------
 * Byte-identical to torch 1.13 (docs/quantized-tables-semantics.md). qtype is Q8, Q4 or Q2. */
/* Bytes of one packed row of `dim` values, or -1 when qtype is not quantized, dim < 0 or the size
 * overflows int64. */
SHAPEJIT_API int64_t shapejit_rowwise_row_bytes(shapejit_dtype qtype, int64_t dim);
typedef struct {
  shapejit_dtype qtype;       /* Q8, Q4 or Q2 */
  const void* src;            /* [rows, dim], rows src_row_stride elements apart */
  shapejit_dtype src_dtype;   /* F32 or F16 (F16 is widened exactly first) */
  int64_t rows, dim, src_row_stride;
  int32_t optimized_qparams;  /* Q4/Q2: torch's choose_qparams_optimized search per row */
  int64_t nbins;              /* search bins (torch's default 200) */
  float ratio;                /* search ratio (torch's default 0.16) */
} shapejit_rowwise_prepack_args;
/* Writes rows x shapejit_rowwise_row_bytes(qtype, dim) bytes to dst. */
SHAPEJIT_API shapejit_status shapejit_rowwise_prepack(const shapejit_rowwise_prepack_args* args, void* dst);
/* Dequantizes packed rows (row_bytes apart, >= the packed row size) to dst [rows, dim] f32. */
SHAPEJIT_API shapejit_status shapejit_rowwise_unpack(shapejit_dtype qtype, const void* src, int64_t rows,
                                                     int64_t dim, int64_t row_bytes, float* dst);

/* Size of the engine's task arena (1 = run on the calling thread). n <= 0 restores the default
 * (SHAPEJIT_NUM_THREADS, else the hardware concurrency). */
SHAPEJIT_API shapejit_status shapejit_set_num_threads(int32_t n);
SHAPEJIT_API int32_t shapejit_get_num_threads(void);
/* The calling thread's last error message ("" if none). Valid until the thread's next call. */
SHAPEJIT_API const char* shapejit_last_error(void);
/* The library's version as SHAPEJIT_VERSION computes it (major * 10000 + minor * 100 + patch), and
 * as "MAJOR.MINOR.PATCH" (static storage). They describe the library that runs, which may differ
 * from the header a program was compiled with. */
SHAPEJIT_API int32_t shapejit_version(void);
SHAPEJIT_API const char* shapejit_version_string(void);
/* A short fixed description of a status (static storage, never NULL; a value outside the enum
 * gets a text saying so). The message of a failed call is shapejit_last_error(). */
SHAPEJIT_API const char* shapejit_status_string(shapejit_status status);

/* ---- Linear groups: fused split-GEMMs (split-gemm-semantics.md) -------------------------
 * Part p computes Y_p = act(X_p W_p^T + b_p) * scale_p with X_p [m, K_p], W_p [N_p, K_p]
 * (PyTorch's [out, in] layout) and b_p [N_p], all f32. A group is built once (weights are
 * copied and packed) and then run any number of times, from any number of threads. */
typedef enum { SHAPEJIT_ACTIVATION_NONE = 0, SHAPEJIT_ACTIVATION_RELU = 1, SHAPEJIT_ACTIVATION_GELU = 2,
               SHAPEJIT_ACTIVATION_GELU_TANH = 3, SHAPEJIT_ACTIVATION_SILU = 4 } shapejit_activation;
/* Row-major [m, N_p] with rows ldy apart, or the contiguous head-split [Nb, H, L, Dh]
 * (N_p = H * Dh, m = Nb * L) from sequence-first rows (row = l * Nb + n) or batch-first rows
 * (row = n * L + l). */
typedef enum { SHAPEJIT_LAYOUT_ROW_MAJOR = 0, SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST = 1,
               SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST = 2 } shapejit_layout;
/* Packed: one weight [weight_rows, k] whose row ranges are the parts' weights (in_proj_weight).
 * Separate: one weight per part, K may differ per part (kdim / vdim). */
typedef enum { SHAPEJIT_WEIGHTS_PACKED = 0, SHAPEJIT_WEIGHTS_SEPARATE = 1 } shapejit_weight_form;

typedef struct {
  int64_t row_begin;          /* first row of the part in the packed weight and in the packed bias */
  int64_t rows;               /* N_p >= 1 */
  const float* weight;        /* separate form: [rows, k], rows weight_stride apart; NULL when packed */
  int64_t k;                  /* separate form: K_p >= 1; packed form: 0 or the packed k */
  int64_t weight_stride;      /* separate form: >= k; packed form: 0 */
  shapejit_activation activation;
  int32_t has_scale; float scale; /* scale applied after the activation when has_scale != 0 */
  shapejit_layout layout;
  int64_t heads;              /* head-split layouts: H >= 1, dividing rows; ignored for row-major */
} shapejit_linear_part_desc;

typedef struct {
  shapejit_weight_form form;
  const float* weight;        /* packed form: [weight_rows, k], rows weight_stride (>= k) apart */
  int64_t weight_rows, k, weight_stride;  /* separate form: weight NULL, all three 0 */
  const float* bias;          /* NULL, or the packed bias of bias_len values (part p reads */
  int64_t bias_len;           /* bias[row_begin, row_begin + rows)) */
  const shapejit_linear_part_desc* parts;
  int64_t num_parts;          /* >= 1 */
} shapejit_linear_group_desc;

/* One part's input and output for one run. Parts may pass the same input. */
typedef struct {
  const float* x; int64_t m, k, ldx;  /* X [m, k] (k must equal the part's K), rows ldx >= k apart */
  float* y;                           /* may be NULL when m == 0 */
  int64_t ldy;                        /* row-major: >= N_p; ignored for head-split */
  int64_t batch, seq_len;             /* head-split: Nb and L with Nb * L == m; ignored for row-major */
} shapejit_linear_group_io;

typedef struct shapejit_linear_group shapejit_linear_group;

/* Validates desc, copies (packs) the weights and bias and sets *out; on failure *out is unchanged. */
SHAPEJIT_API shapejit_status shapejit_linear_group_create(const shapejit_linear_group_desc* desc,
                                                          shapejit_linear_group** out);
/* Runs every part: io holds num_io == the group's num_parts entries. Every argument is checked
 * before any output is written; outputs must not overlap each other or any input. As everywhere,
 * x and y (when m > 0), the weights and the bias must be 4-byte aligned. */
SHAPEJIT_API shapejit_status shapejit_linear_group_run(const shapejit_linear_group* group,
                                                       const shapejit_linear_group_io* io, int64_t num_io);
/* Frees the group (NULL is a no-op). */
SHAPEJIT_API shapejit_status shapejit_linear_group_destroy(shapejit_linear_group* group);

/* ---- Quantized linear groups (docs/quantized-linear-semantics.md) ----------------------
 * The same groups with int8 / int4 weight codes per output channel, and for the qd8 forms the
 * input quantized to int8 per row at each run (exact int32 accumulation). Running is unchanged:
 * shapejit_linear_group_run with float32 inputs and outputs. */
typedef enum { SHAPEJIT_LINEAR_F32 = 0, SHAPEJIT_LINEAR_QD8_QC8W = 1, SHAPEJIT_LINEAR_QD8_QC4W = 2,
               SHAPEJIT_LINEAR_F32_QC8W = 3, SHAPEJIT_LINEAR_F32_QC4W = 4 } shapejit_linear_quant;
/* Weight codes [rows, k], one code per int8 byte (also for int4: [-8, 7]; int8: [-127, 127]),
 * rows stride >= k bytes apart, and one scale >= 0 per row: the weight is scales[r] * code. */
typedef struct { const int8_t* codes; int64_t stride; const float* scales; } shapejit_linear_weight_codes;
/* A group description with its quantized form. Set struct_size to
 * sizeof(shapejit_linear_group_ex_desc) (shapejit_linear_group_ex_init does): later versions
 * append fields and read only what the caller's struct_size covers. */
typedef struct {
  size_t struct_size;
  shapejit_linear_group_desc group;           /* as for shapejit_linear_group_create */
  shapejit_linear_quant quant;
  const shapejit_linear_weight_codes* codes;  /* NULL: the group's f32 weights are quantized at build
                                                 time; else num_codes entries: */
  int64_t num_codes;  /* packed form: 1 entry [weight_rows, k] (group.weight NULL); separate form:
                         num_parts entries [rows, k_p] (each parts[p].weight NULL) */
} shapejit_linear_group_ex_desc;
/* struct_size set, group copied from *group (zeros when NULL), quant F32, no codes: the ex
 * description equal to shapejit_linear_group_create(group). */
SHAPEJIT_API void shapejit_linear_group_ex_init(shapejit_linear_group_ex_desc* desc,
                                                const shapejit_linear_group_desc* group);
/* Validates desc, quantizes or copies the weights, packs them and sets *out; on failure *out is
 * unchanged. */
SHAPEJIT_API shapejit_status shapejit_linear_group_create_ex(const shapejit_linear_group_ex_desc* desc,
                                                             shapejit_linear_group** out);
/* Quantizes w [rows, k] (rows stride floats apart) per row by the rules of quant (a quantized
 * form): codes [rows, k] dense, scales [rows]. A non-finite weight is an error naming it. */
SHAPEJIT_API shapejit_status shapejit_linear_quantize_weights(shapejit_linear_quant quant, const float* w,
                                                              int64_t rows, int64_t k, int64_t stride,
                                                              int8_t* codes, float* scales);

/* Engine statistics (counters since the process started): the kernel caches' (embedding bags'
 * and linear groups' GEMM kernels, summed), then fields appended in later versions. */
typedef struct {
  int64_t hits;                /* lookups served by a cached or in-flight compilation */
  int64_t misses;              /* lookups that started a compilation */
  int64_t compilations;        /* compilations that succeeded */
  int64_t failed_compilations; /* compilations that failed (never cached; retried on next use) */
  int64_t compile_time_ns;     /* wall time spent compiling */
  int64_t code_bytes;          /* JIT code held */
  int64_t kernels;             /* kernels held */
  int64_t generic_fallbacks;   /* lookups run on the generic kernel because of the code limit */
  int64_t code_limit_bytes;    /* the code-memory limit in force */
  /* ---- appended after 0.1: filled only by shapejit_get_kernel_cache_stats_sized ---- */
  int64_t reference_linear_groups; /* linear groups built to run the double-precision reference
                                      because no GEMM generator takes their ISA or shape */
} shapejit_kernel_cache_stats;
/* Fills the first nine fields, those of shapejit 0.1, and never writes past them: callers built
 * against an older header pass a smaller struct. */
SHAPEJIT_API shapejit_status shapejit_get_kernel_cache_stats(shapejit_kernel_cache_stats* stats);
/* Fills every field that lies wholly within the first stats_size bytes: pass sizeof *stats.
 * Fields a caller's newer header has and this library lacks are left as they were. stats_size
 * must cover at least the nine fields of 0.1. */
SHAPEJIT_API shapejit_status shapejit_get_kernel_cache_stats_sized(shapejit_kernel_cache_stats* stats,
                                                                   size_t stats_size);
/* Bound on JIT code memory: the cache never holds more code than this, even while several
 * threads compile; a new shape whose kernel does not fit runs a generic kernel (slower, same
 * results). bytes < 0 restores the default (SHAPEJIT_CODE_LIMIT_BYTES, else 64 MiB); 0 compiles
 * nothing new. */
SHAPEJIT_API shapejit_status shapejit_set_code_memory_limit(int64_t bytes);

#ifdef __cplusplus
}
#endif
#endif
