// RestoreRound: rebuilds a round after a server restart from the journal it
// left (JournalRecorder's RoundRecord records), so its members can resume it.
//
// The journal is replayed through the round's own methods in the order it
// was written, which rebuilds the same log: every frame in the same place,
// so a client's count of frames received still names the same frames, and
// an all_reduce's result frames come out the same. Wake-ups and events of
// the replay are dropped (they happened before the restart). Every rank
// that had attached is then detached as of `now`, for its resume grace.
//
// A restored round holds no more than a live one: past max_buffered_bytes,
// the oldest replayed frames stay in the journal, and each receiver's
// stream reads them back when it reaches them (Round::ReplayChunk). An
// all_reduce keeps its accumulators and result frames in memory, as live.
#ifndef FEDGATHER_SERVER_RELAY_ROUND_RESTORE_H_
#define FEDGATHER_SERVER_RELAY_ROUND_RESTORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/relay/round.h"

namespace fedgather::server {

struct RestoredRound {
  std::shared_ptr<Round> round;
  int64_t journal_bytes = 0;  // the intact journal's length
};

// RestoreRound builds a Round with `options` from the journal at `path`,
// which then takes its further records. DATA_LOSS when the journal is not
// one, holds a record the round rejects, or replays to a failed round; the
// read's error when it cannot be read.
absl::StatusOr<RestoredRound> RestoreRound(RoundOptions options,
                                           const std::string& path,
                                           absl::Time now);

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_RELAY_ROUND_RESTORE_H_
