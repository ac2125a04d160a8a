/* Sums two bags of a 3 x 2 table through the installed C ABI and checks the result, the version
 * and the status texts. */
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
  printf("consumer_c: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
