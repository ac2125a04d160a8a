#include "support/prepared_embag.hpp"

namespace shapejit::test {

shapejit_embedding_bag_batch batch_of(const shapejit_embedding_bag_args& call) {
  return {call.indices, call.num_indices, call.offsets, call.num_offsets, call.per_sample_weights};
}

shapejit_status run_prepared(const shapejit_embedding_bag_ex_args& call, void* output, void* offset2bag,
                             void* bag_size, void* max_indices, std::string* message) {
  shapejit_embedding_bag_prepared* prepared = nullptr;
  shapejit_status status = shapejit_embedding_bag_prepare(&call, &prepared);
  if (status == SHAPEJIT_OK) {
    const shapejit_embedding_bag_batch batch = batch_of(call.call);
    status = shapejit_embedding_bag_prepared_run(prepared, &batch, output, offset2bag, bag_size, max_indices);
  }
  if (message) *message = shapejit_last_error();
  shapejit_embedding_bag_prepared_destroy(prepared);
  return status;
}

}  // namespace shapejit::test
