// AttachRequest: what a rank's stream hands a round when it attaches to it
// (Round::Attach) or resumes it (Round::Resume).
#ifndef FEDGATHER_SERVER_RELAY_ATTACH_REQUEST_H_
#define FEDGATHER_SERVER_RELAY_ATTACH_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/fingerprint.h"
#include "fedgather/v1/fedgather.pb.h"
#include "server/control/round_data_plane.h"

namespace fedgather::server {

// One rank's header, as the round takes it. The round takes the request by
// value and keeps what it needs (the header and fingerprint, to check a
// resume against; the frame, to forward and journal).
struct AttachRequest {
  int rank = 0;      // the caller's rank in the round's epoch
  std::string peer;  // the stream's address, for events
  // The header as decoded: op, root, reduce, weight; for a resume, also
  // frames_received and contribution_sha256.
  v1::CollectiveHeader header;
  // The header's tensors, already parsed and checked by the caller
  // (FingerprintFromProto), so the round does not parse them again.
  Fingerprint fingerprint;
  // The header's frame as it arrived: forwarded unchanged to the other
  // ranks and journaled (kAttach). Shares the transport's slices.
  grpc::ByteBuffer header_frame;
  // The stream to wake; empty for a rank replayed from a journal.
  std::weak_ptr<RoundStream> stream;
  // What the rank uploads: UploadBytes, computed once by the caller (which
  // also checks it against the caller's limits).
  int64_t upload_bytes = 0;
};

// UploadBytes is what `rank` uploads with `header`, whose tensors are
// `fingerprint`: none for a BROADCAST's other ranks, else the tensors'
// bytes (INT64_MAX when they overflow, which no limit admits).
int64_t UploadBytes(int rank, const v1::CollectiveHeader& header,
                    const Fingerprint& fingerprint);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_ATTACH_REQUEST_H_
