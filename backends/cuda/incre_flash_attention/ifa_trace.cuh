// The split and combine kernels' phase trace lives in ifa_measure.cuh with the other measurement
// hooks; this name is kept for the drivers that include it.
#pragma once
#include "ifa_measure.cuh"
