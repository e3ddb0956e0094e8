// A C++ host of the installed static library: uses the C++ Tensor API.
#include <loom/convert.hpp>
#include <loom/tensor.hpp>

#include <cstdio>

int main() {
  auto t = loom::Tensor::zeros(loom::Shape{2, 3}, loom::DType::f32);
  const float one = 1.0f;
  uint16_t half = 0;
  loom::f32_to_f16(&one, &half, 1);
  if (t.numel() != 6 || half != 0x3C00) return 1;
  std::printf("%s, 1.0f -> f16 0x%04x\n", t.describe().c_str(), half);
  return 0;
}
