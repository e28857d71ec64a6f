/* Our own minimal declarations of the AscendCL runtime (CANN's acl/acl_base.h) that dualops'
 * NPU host code uses, with CANN's names and signatures. Used by tests/test_npu_launch_code.py
 * only where CANN's own headers (an installed CANN, or those inside a downloaded torch_npu wheel)
 * are not at hand; it is not CANN's file and nothing is built against it. */
#ifndef DUALOPS_TESTS_ACL_MIN_ACL_BASE_H_
#define DUALOPS_TESTS_ACL_MIN_ACL_BASE_H_
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef int aclError;
typedef void *aclrtStream;
static const int ACL_SUCCESS = 0;
typedef enum aclDeviceInfo {
  ACL_DEVICE_INFO_AI_CORE_NUM = 0,
  ACL_DEVICE_INFO_VECTOR_CORE_NUM = 1,
  ACL_DEVICE_INFO_L2_SIZE = 2
} aclDeviceInfo;
const char *aclrtGetSocName();
aclError aclGetDeviceCapability(uint32_t deviceId, aclDeviceInfo deviceInfo, int64_t *value);
#ifdef __cplusplus
}
#endif
#endif
