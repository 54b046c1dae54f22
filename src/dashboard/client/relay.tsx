/** The transactional outbox's relay: backlog and lag (live), and the events a target refused for good. */
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, can, enc, useLive } from "./api";
import { count, duration, time } from "./format";
import { ActionButton, JsonBlock, LiveDot, Notice } from "./widgets";

interface RelayStatus {
  backlog: number | null;
  oldestUnpublishedAgeMs: number | null;
  slotLagBytes: number | null;
  dead: number;
}

/** A set-aside event as GET /outbox/dead sends it (see src/http/routes/outbox.ts). */
interface DeadEvent {
  id: string;
  topic: string;
  key: string | null;
  payload: unknown;
  headers: Record<string, string>;
  createdAt: string;
  failedAt: string;
  target: string;
  error: string;
}

const PAGE = 50;

export function RelayPage() {
  const live = useLive<RelayStatus>("topic=relay");
  const status = live.data;
  const admin = can("admin");
  const [events, setEvents] = useState<DeadEvent[] | null>(null);
  const [message, setMessage] = useState<{ kind: "info" | "error"; text: string } | null>(null);
  const [reload, setReload] = useState(0);
  const deadCount = status?.dead;

  useEffect(() => {
    if (!admin) return;
    let cancelled = false;
    call<{ events: DeadEvent[]; total: number }>("GET", `/outbox/dead?limit=${PAGE}`)
      .then((r) => !cancelled && setEvents(r.events))
      .catch((e: unknown) => !cancelled && setMessage({ kind: "error", text: e instanceof ApiError ? e.message : String(e) }));
    return () => {
      cancelled = true;
    };
  }, [admin, deadCount, reload]);

  const lagWarn = (status?.oldestUnpublishedAgeMs ?? 0) > 60_000;
  return (
    <section aria-labelledby="title">
      <div class="title-row">
        <h1 id="title">Relay</h1>
        <LiveDot connected={live.connected} />
      </div>
      <ul class="cards" aria-label="Outbox status">
        <li class={(status?.backlog ?? 0) > 0 ? "card-warn" : ""}>
          <span class="card-label">Backlog (events waiting)</span>
          <span class="card-value">{status ? (status.backlog === null ? "unknown" : count(status.backlog)) : "…"}</span>
        </li>
        <li class={lagWarn ? "card-warn" : ""}>
          <span class="card-label">Lag (oldest waiting)</span>
          <span class="card-value">{status ? (status.oldestUnpublishedAgeMs === null ? "none" : duration(status.oldestUnpublishedAgeMs)) : "…"}</span>
        </li>
        {status?.slotLagBytes !== null && status?.slotLagBytes !== undefined && (
          <li>
            <span class="card-label">WAL held by the slot</span>
            <span class="card-value">{count(status.slotLagBytes)} bytes</span>
          </li>
        )}
        <li class={(status?.dead ?? 0) > 0 ? "card-bad" : ""}>
          <span class="card-label">Set aside (refused for good)</span>
          <span class="card-value">{status ? count(status.dead) : "…"}</span>
        </li>
      </ul>
      <h2>Set-aside events</h2>
      {message && <Notice kind={message.kind}>{message.text}</Notice>}
      {!admin ? (
        <Notice>Set-aside events carry business payloads: they are shown to admin keys only.</Notice>
      ) : events === null ? (
        <p>Loading…</p>
      ) : events.length === 0 ? (
        <Notice>No set-aside events: every event the relay took was published.</Notice>
      ) : (
        <ul class="dead-list">
          {events.map((e) => (
            <li key={e.id} class="dead">
              <div class="dead-head">
                <span class="mono">
                  {e.topic} <span class="dim">{e.id}</span>
                </span>
                <span class="dim">
                  key {e.key ?? "—"}, set aside {time(e.failedAt)} by {e.target}
                </span>
                <span class="spacer" />
                <ActionButton
                  label="Replay"
                  title={`Replay event ${e.id}`}
                  run={() => call("POST", "/outbox/dead/replay", { ids: [e.id] })}
                  onDone={() => {
                    setMessage({ kind: "info", text: `Replayed event ${e.id}: it is back in the outbox, behind its key's waiting events.` });
                    setReload((n) => n + 1);
                  }}
                />
                <ActionButton
                  label="Delete"
                  kind="danger"
                  title={`Delete event ${e.id}`}
                  confirm="Delete this event for good? It will never be published."
                  run={() => call("DELETE", `/outbox/dead/${enc(e.id)}`)}
                  onDone={() => {
                    setMessage({ kind: "info", text: `Deleted event ${e.id}.` });
                    setReload((n) => n + 1);
                  }}
                />
              </div>
              <p class="error-line">{e.error}</p>
              <details>
                <summary>Payload and headers</summary>
                <JsonBlock value={{ payload: e.payload, headers: e.headers, createdAt: e.createdAt }} label={`Payload of event ${e.id}`} />
              </details>
            </li>
          ))}
        </ul>
      )}
      {admin && deadCount !== undefined && deadCount > PAGE && (
        <p class="hint">
          Showing the newest {PAGE} of {count(deadCount)}; replay or delete some to see older ones, or use conveyor relay dead ls.
        </p>
      )}
    </section>
  );
}
