#pragma once

// Umbrella header of the flashattn C++ API.
#include "flashattn/api.h"
#include "flashattn/error.h"
#include "flashattn/params.h"
#include "flashattn/tensor.h"
#include "flashattn/version.h"
