// The data planes' names and which ops run on the direct plane
// (docs/protocol.md, "Data planes"), shared by the server and the client.
#ifndef FEDGATHER_COMMON_DATA_PLANE_NAME_H_
#define FEDGATHER_COMMON_DATA_PLANE_NAME_H_

#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// DataPlaneName: "relay" (DATA_PLANE_UNSPECIFIED included), "direct", or
// "unknown" for a value this build does not know.
const char* DataPlaneName(v1::DataPlane plane);

// RoundPlane is the plane a round of `op` runs on in an epoch whose plane
// is `epoch_plane`: DIRECT for ALL_GATHER, ALL_GATHER_V and
// ALL_GATHER_BYTES in a DIRECT epoch, RELAY otherwise.
v1::DataPlane RoundPlane(v1::DataPlane epoch_plane, v1::Op op);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_DATA_PLANE_NAME_H_
