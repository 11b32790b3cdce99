#include "common/data_plane_name.h"

namespace fedgather {

const char* DataPlaneName(v1::DataPlane plane) {
  switch (plane) {
    case v1::DATA_PLANE_UNSPECIFIED:
    case v1::DATA_PLANE_RELAY:
      return "relay";
    case v1::DATA_PLANE_DIRECT:
      return "direct";
    default:
      return "unknown";
  }
}

}  // namespace fedgather
