// The data planes' names (docs/protocol.md, "Data planes"), shared by the
// server and the client. Every op of an epoch runs on the epoch's plane.
#ifndef FEDGATHER_COMMON_DATA_PLANE_NAME_H_
#define FEDGATHER_COMMON_DATA_PLANE_NAME_H_

#include "fedgather/v1/fedgather.pb.h"

namespace fedgather {

// DataPlaneName: "relay" (DATA_PLANE_UNSPECIFIED included), "direct", or
// "unknown" for a value this build does not know.
const char* DataPlaneName(v1::DataPlane plane);

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_DATA_PLANE_NAME_H_
