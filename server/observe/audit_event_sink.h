// AuditEventSink: writes every server event to the audit log as one record,
// then passes it on to the next sink (the server's log, a test's recorder).
// The mapping from events to audit actions is in docs/security.md.
//
// Thread safety: as EventSink; AuditLog::Append never blocks on I/O.
#ifndef FEDGATHER_SERVER_OBSERVE_AUDIT_EVENT_SINK_H_
#define FEDGATHER_SERVER_OBSERVE_AUDIT_EVENT_SINK_H_

#include "server/events/event_sink.h"
#include "server/observe/audit_log.h"

namespace fedgather::server {

// AuditRecordFromEvent maps one event to its audit record.
AuditRecord AuditRecordFromEvent(const ServerEvent& event);

class AuditEventSink : public EventSink {
 public:
  // `log` must outlive the sink; `next` may be null, else must outlive it.
  AuditEventSink(AuditLog* log, EventSink* next) : log_(log), next_(next) {}

  void OnEvent(const ServerEvent& event) override;

 private:
  AuditLog* const log_;
  EventSink* const next_;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_OBSERVE_AUDIT_EVENT_SINK_H_
