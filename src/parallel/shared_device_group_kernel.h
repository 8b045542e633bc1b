// The one kernel of SharedDeviceGroup (shared_device_group.cu): out[i] = sum over s of
// src[s][offset + i] in rank order, accumulated in fp32, for fp32 or bf16 buffers.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "parallel/device_communicator.h"

namespace gyre::parallel {

struct SumRanksParams {
  const void* src[16];  // SharedDeviceGroup::kMaxRanks staging buffers
  int n = 0;
  int64_t offset = 0;  // elements
  int64_t count = 0;   // elements
  void* out = nullptr;
};

Status LaunchSumRanks(const SumRanksParams& p, DType dtype, DeviceStream stream);

}  // namespace gyre::parallel
