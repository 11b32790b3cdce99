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

v1::DataPlane RoundPlane(v1::DataPlane epoch_plane, v1::Op op) {
  const bool gathers = op == v1::ALL_GATHER || op == v1::ALL_GATHER_V ||
                       op == v1::ALL_GATHER_BYTES;
  return epoch_plane == v1::DATA_PLANE_DIRECT && gathers ? v1::DATA_PLANE_DIRECT
                                                         : v1::DATA_PLANE_RELAY;
}

}  // namespace fedgather
