// An embedding-bag call run as a prepared call (shapejit_embedding_bag_prepare on its form, then
// shapejit_embedding_bag_prepared_run on its batch), so every test that runs a call can check that
// the prepared path gives the same status, message and outputs.
#pragma once

#include <string>

#include "shapejit/shapejit.h"

namespace shapejit::test {

/// The batch of a call: its indices, offsets, their counts and its weights' pointer.
shapejit_embedding_bag_batch batch_of(const shapejit_embedding_bag_args& call);

/// The status of preparing `call`'s form and running its batch into the outputs (the prepare's
/// status when it fails; the run is then not made), and shapejit_last_error() after it in
/// `message`.
shapejit_status run_prepared(const shapejit_embedding_bag_ex_args& call, void* output, void* offset2bag,
                             void* bag_size, void* max_indices, std::string* message = nullptr);

}  // namespace shapejit::test
