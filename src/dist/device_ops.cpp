// Chooses the DeviceOps implementation for a device: the host loops, or the CUDA kernels in builds with
// CUDA.

#include "dist/device_ops.h"

#include "flashattn/error.h"

namespace flashattn::dist::detail {

DeviceOps& device_ops(Device device) {
  if (device.type == DeviceType::cpu) return host_ops();
#if defined(FLASHATTN_WITH_CUDA)
  if (device.type == DeviceType::cuda) return cuda_ops(device.index);
#endif
  throw Error(Status::unsupported, "flashattn::dist: tensors on " + device_name(device) +
                                       ": this build has no merge and accumulation kernels for that device "
                                       "(build with -DFLASHATTN_CUDA=ON for CUDA tensors); pass CPU tensors");
}

}  // namespace flashattn::dist::detail
