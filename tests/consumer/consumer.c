/* Sums two bags of a 3 x 2 table through the installed C ABI and checks the result, the version
 * and the status texts; builds and runs a quantized linear group (qd8-qc8w) from C. */
#include <shapejit/shapejit.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  const float table[6] = {1, 2, 3, 4, 5, 6};
  const int64_t idx[3] = {0, 2, 1}, off[2] = {0, 1};
  float out[4];
  shapejit_embedding_bag_args a = {0};
  a.weight = table; a.weight_dtype = SHAPEJIT_F32; a.num_rows = 3; a.dim = 2; a.row_stride = 2;
  a.indices = idx; a.index_dtype = SHAPEJIT_I64; a.num_indices = 3;
  a.offsets = off; a.offset_dtype = SHAPEJIT_I64; a.num_offsets = 2;
  a.mode = SHAPEJIT_SUM;
  int64_t bag_size[2], max_indices[2];
  if (shapejit_embedding_bag(&a, out, NULL, bag_size, max_indices) != SHAPEJIT_OK) {
    printf("error: %s\n", shapejit_last_error());
    return 1;
  }
  int ok = out[0] == 1 && out[1] == 2 && out[2] == 8 && out[3] == 10;
  /* The installed header and the installed library are the same version. */
  if (shapejit_version() != SHAPEJIT_VERSION || strcmp(shapejit_version_string(), SHAPEJIT_VERSION_STRING) != 0) {
    printf("version: header %s (%d), library %s (%d)\n", SHAPEJIT_VERSION_STRING, SHAPEJIT_VERSION,
           shapejit_version_string(), (int)shapejit_version());
    ok = 0;
  }
  /* Every status has a text, a value C lets a caller store in the enum included. */
  if (strcmp(shapejit_status_string(SHAPEJIT_OK), "ok") != 0 || shapejit_status_string((shapejit_status)99) == NULL ||
      strstr(shapejit_status_string((shapejit_status)99), "unknown") == NULL) {
    printf("status_string: unexpected texts\n");
    ok = 0;
  }
  /* A quantized linear group from C: W = [[1, 0], [0, -1]] as int8 codes with scale 1/127
   * each, X = [[2, 0.5]]; on the int8 grids both are exact, so Y = [[2, -0.5]] up to rounding. */
  {
    const int8_t codes[4] = {127, 0, 0, -127};
    const float scales[2] = {1.0f / 127.0f, 1.0f / 127.0f};
    const shapejit_linear_weight_codes entry = {codes, 2, scales};
    shapejit_linear_part_desc part;
    memset(&part, 0, sizeof part);
    part.rows = 2;
    shapejit_linear_group_desc group;
    memset(&group, 0, sizeof group);
    group.form = SHAPEJIT_WEIGHTS_PACKED;
    group.weight_rows = 2; group.k = 2; group.parts = &part; group.num_parts = 1;
    shapejit_linear_group_ex_desc ex;
    shapejit_linear_group_ex_init(&ex, &group);
    ex.quant = SHAPEJIT_LINEAR_QD8_QC8W;
    ex.codes = &entry; ex.num_codes = 1;
    shapejit_linear_group* g = NULL;
    const float x[2] = {2.0f, 0.5f};
    float y[2] = {0, 0};
    const shapejit_linear_group_io run = {x, 1, 2, 2, y, 2, 0, 0};
    if (shapejit_linear_group_create_ex(&ex, &g) != SHAPEJIT_OK || shapejit_linear_group_run(g, &run, 1) != SHAPEJIT_OK) {
      printf("quantized linear group: %s\n", shapejit_last_error());
      ok = 0;
    } else if (!(y[0] > 1.99f && y[0] < 2.01f && y[1] < -0.49f && y[1] > -0.51f)) {
      printf("quantized linear group: y = %g %g\n", y[0], y[1]);
      ok = 0;
    }
    shapejit_linear_group_destroy(g);
  }
  printf("consumer_c: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
