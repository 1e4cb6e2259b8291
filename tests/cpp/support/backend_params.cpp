#include "backend_params.h"

namespace fa_test {

std::vector<std::string> tested_backends() {
  std::vector<std::string> out;
  for (const flashattn::BackendInfo& b : flashattn::list_backends())
    if (b.name != "cpu_reference") out.push_back(b.name);
  const std::vector<std::string> isas = flashattn::cpu_isas();
  for (size_t i = 1; i < isas.size(); ++i) out.push_back("cpu_flash@" + isas[i]);
  return out;
}

BackendUnderTest::BackendUnderTest(const std::string& tested) : name_(tested.substr(0, tested.find('@'))) {
  if (name_.size() == tested.size()) return;
  flashattn::set_cpu_isa(tested.substr(name_.size() + 1));
  forced_ = true;
}

BackendUnderTest::~BackendUnderTest() {
  if (forced_) flashattn::set_cpu_isa("");
}

std::string backend_case_name(const std::string& backend, const AttnConfig& cfg, int index) {
  std::string s = backend + "_" + std::to_string(index) + "_" + cfg.name();
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

}  // namespace fa_test
