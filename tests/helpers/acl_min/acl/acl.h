/* Our own minimal declarations of CANN's acl/acl.h (see acl_base.h beside it). */
#ifndef DUALOPS_TESTS_ACL_MIN_ACL_H_
#define DUALOPS_TESTS_ACL_MIN_ACL_H_
#include "acl/acl_base.h"
#ifdef __cplusplus
extern "C" {
#endif
#define ACL_PKG_VERSION_MAX_SIZE 128
#define ACL_PKG_VERSION_PARTS_MAX_SIZE 64
typedef enum aclCANNPackageName_ {
  ACL_PKG_NAME_CANN, ACL_PKG_NAME_RUNTIME, ACL_PKG_NAME_COMPILER, ACL_PKG_NAME_HCCL, ACL_PKG_NAME_TOOLKIT,
  ACL_PKG_NAME_OPP, ACL_PKG_NAME_OPP_KERNEL, ACL_PKG_NAME_DRIVER
} aclCANNPackageName;
typedef struct aclCANNPackageVersion_ {
  char version[ACL_PKG_VERSION_MAX_SIZE];
  char majorVersion[ACL_PKG_VERSION_PARTS_MAX_SIZE];
  char minorVersion[ACL_PKG_VERSION_PARTS_MAX_SIZE];
  char releaseVersion[ACL_PKG_VERSION_PARTS_MAX_SIZE];
  char patchVersion[ACL_PKG_VERSION_PARTS_MAX_SIZE];
  char reserved[ACL_PKG_VERSION_MAX_SIZE];
} aclCANNPackageVersion;
aclError aclsysGetCANNVersion(aclCANNPackageName name, aclCANNPackageVersion *version);
aclError aclrtGetDevice(int32_t *deviceId);
#ifdef __cplusplus
}
#endif
#endif
