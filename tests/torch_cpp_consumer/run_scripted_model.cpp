// Usage: run_scripted_model MODEL.pt LIBSHAPEJIT_TORCH_OPS.so
// 1. torch::jit::load(MODEL) before the extension is loaded must fail (torch does not know the
//    shapejit operators and classes the model calls): prints "before: refused: <first line>".
// 2. dlopen(LIB) runs the extension's static TORCH_LIBRARY registrations, which is all that
//    torch.ops.load_library does in Python; the model then loads.
// 3. forward(indices, offsets, x) on fixed inputs; every output value is printed as "out k: v v ..."
//    with 9 significant digits for the Python side to compare with its own run of the model.
#include <dlfcn.h>
#include <torch/script.h>

#include <cstdio>
#include <string>

namespace {

// The first non-empty line of a message (torch's script errors start with a newline).
std::string first_line(const std::string& s) {
  const size_t begin = s.find_first_not_of('\n');
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find('\n', begin) - begin);
}

void print_tensor(int k, const at::Tensor& t) {
  const at::Tensor flat = t.contiguous().to(at::kFloat).reshape({-1});
  std::printf("out %d:", k);
  for (int64_t i = 0; i < flat.numel(); ++i) std::printf(" %.9g", flat[i].item<float>());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.pt LIBSHAPEJIT_TORCH_OPS.so\n", argv[0]);
    return 2;
  }
  try {
    torch::jit::load(argv[1]);
    std::printf("before: loaded\n");  // the caller's test fails on this line
  } catch (const std::exception& e) {  // torch::jit::ErrorReport, not a c10::Error
    std::printf("before: refused: %s\n", first_line(e.what()).c_str());
  }
  if (!dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) {
    std::fprintf(stderr, "dlopen(%s) failed: %s\n", argv[2], dlerror());
    return 1;
  }
  torch::jit::Module model = torch::jit::load(argv[1]);
  model.eval();
  const at::Tensor indices = torch::tensor({1, 5, 7, 2, 2, 9, 0}, torch::kLong);
  const at::Tensor offsets = torch::tensor({0, 3, 3, 5}, torch::kLong);
  const at::Tensor x = torch::arange(2 * 3 * 8, torch::kFloat).reshape({2, 3, 8}).div_(50.0).sin_();
  torch::NoGradGuard no_grad;
  const c10::IValue result = model.forward({indices, offsets, x});
  const auto outputs = result.toTuple()->elements();
  for (size_t k = 0; k < outputs.size(); ++k) print_tensor(static_cast<int>(k), outputs[k].toTensor());
  return 0;
}
