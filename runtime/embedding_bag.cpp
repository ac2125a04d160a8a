#include "runtime/embedding_bag.hpp"

#include "ref/embedding_bag.hpp"
#include "runtime/validate.hpp"

namespace shapejit::rt {

void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  const shapejit_embedding_bag_shapes shapes = validate_embedding_bag(args);
  validate_embedding_bag_outputs(shapes, output, offset2bag, bag_size, max_indices);
  ref::embedding_bag(args, output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
