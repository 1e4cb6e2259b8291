#include "backend_params.h"

namespace fa_test {

std::vector<std::string> tested_backends() {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends())
    if (b.name != "cpu_reference") out.push_back(b.name);
  return out;
}

std::string backend_case_name(const std::string& backend, const AttnConfig& cfg, int index) {
  std::string s = backend + "_" + std::to_string(index) + "_" + cfg.name();
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

}  // namespace fa_test
