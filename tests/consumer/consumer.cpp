// Uses the installed C++ API, including its exception on bad input (caught across the library
// boundary, so shapejit::Error's typeinfo must be exported) and the version query.
#include <shapejit/shapejit.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  std::vector<float> table{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> idx{0, 2, 1}, off{0, 1};
  shapejit::EmbeddingBagCall call;
  call.weight = {table.data(), shapejit::DType::kF32, 3, 2};
  call.indices = idx;
  call.offsets = off;
  call.mode = shapejit::Mode::kMax;
  const auto r = shapejit::embedding_bag(call);
  bool ok = r.output == std::vector<float>{1, 2, 5, 6} && r.max_indices == std::vector<int64_t>{0, 0, 2, 2};
  idx[1] = 99;
  try {
    shapejit::embedding_bag(call);
    ok = false;
  } catch (const shapejit::Error& e) {
    ok = ok && e.status() == shapejit::Status::kInvalidArgument;
  }
  ok = ok && shapejit::version() == SHAPEJIT_VERSION && std::string(shapejit::version_string()) == SHAPEJIT_VERSION_STRING;
  ok = ok && std::string(shapejit::status_string(shapejit::Status::kOk)) == "ok";
  std::printf("consumer_cpp: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
