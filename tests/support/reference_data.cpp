#include "support/reference_data.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "support/test_support.hpp"

namespace loom::test {

std::vector<int32_t> read_ids(const std::filesystem::path& path) {
  std::istringstream in(read_file_text(path));
  std::vector<int32_t> ids;
  for (int64_t v; in >> v;) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

std::vector<std::vector<float>> read_logits(const std::filesystem::path& path) {
  const std::string text = read_file_text(path);
  std::vector<std::vector<float>> rows;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos && text[pos] != '#') {
      std::vector<float> row;
      const char* p = text.data() + pos;
      const char* stop = text.data() + end;
      while (p < stop) {
        char* next = nullptr;
        const float v = std::strtof(p, &next);
        if (next == p) break;
        row.push_back(v);
        p = next;
      }
      if (!row.empty()) rows.push_back(std::move(row));
    }
    pos = end + 1;
  }
  return rows;
}

double relative_l2(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) throw std::runtime_error("relative_l2: size mismatch");
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

int64_t argmax(std::span<const float> v) {
  int64_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best;
}

}  // namespace loom::test
