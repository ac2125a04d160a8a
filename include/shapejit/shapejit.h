/* shapejit C ABI: JIT-generated embedding bags and linear groups.
 *
 * Every function returns a status; on failure shapejit_last_error() returns the calling
 * thread's last message (argument, value and rule). A failed call leaves every output
 * buffer exactly as it was. All buffers are dense and row-major unless a stride says
 * otherwise. The exact semantics are those of ATen's _embedding_bag (see
 * docs/embedding-bag-semantics.md in the project's shared documents). */
#ifndef SHAPEJIT_SHAPEJIT_H
#define SHAPEJIT_SHAPEJIT_H

#include <stdint.h>

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
typedef enum { SHAPEJIT_F32 = 0, SHAPEJIT_F16 = 1, SHAPEJIT_BF16 = 2,
               SHAPEJIT_I32 = 3, SHAPEJIT_I64 = 4 } shapejit_dtype;
typedef enum { SHAPEJIT_SUM = 0, SHAPEJIT_MEAN = 1, SHAPEJIT_MAX = 2 } shapejit_mode;

/* One embedding-bag call. weight is [num_rows, dim] with rows row_stride elements apart
 * (row_stride >= dim). indices [num_indices] and offsets [num_offsets] are int32 or int64;
 * if the two differ both are promoted to int64. */
typedef struct {
  const void* weight; shapejit_dtype weight_dtype; int64_t num_rows; int64_t dim; int64_t row_stride;
  const void* indices; shapejit_dtype index_dtype; int64_t num_indices;
  const void* offsets; shapejit_dtype offset_dtype; int64_t num_offsets;
  const void* per_sample_weights;            /* NULL, or num_indices values of weight_dtype */
  shapejit_mode mode;
  int32_t has_padding_idx; int64_t padding_idx;
  int32_t include_last_offset;
  int32_t aten_partial_final_offset;         /* see embedding-bag-semantics.md */
} shapejit_embedding_bag_args;

/* Output shapes of a call, so callers can allocate them. */
typedef struct {
  int64_t output_rows, output_cols;          /* output is output_rows x output_cols, weight dtype */
  shapejit_dtype index_out_dtype;            /* dtype of offset2bag, bag_size, max_indices */
  int64_t offset2bag_len, bag_size_len, max_indices_rows, max_indices_cols;
} shapejit_embedding_bag_shapes;

SHAPEJIT_API shapejit_status shapejit_embedding_bag_output_shapes(const shapejit_embedding_bag_args*,
                                                                  shapejit_embedding_bag_shapes*);
/* Writes all four ATen outputs. A zero-length output may be passed as NULL. */
SHAPEJIT_API shapejit_status shapejit_embedding_bag(const shapejit_embedding_bag_args*, void* output,
                                                    void* offset2bag, void* bag_size, void* max_indices);
/* Size of the engine's task arena (1 = run on the calling thread). n <= 0 restores the default
 * (SHAPEJIT_NUM_THREADS, else the hardware concurrency). */
SHAPEJIT_API shapejit_status shapejit_set_num_threads(int32_t n);
SHAPEJIT_API int32_t shapejit_get_num_threads(void);
/* The calling thread's last error message ("" if none). Valid until the thread's next call. */
SHAPEJIT_API const char* shapejit_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
