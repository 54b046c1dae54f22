/** Cron schedules: their last and next runs; run one now (enqueue scope) or delete it (admin). */
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, can, enc } from "./api";
import { ago, time } from "./format";
import { ActionButton, JsonBlock, Notice } from "./widgets";

/** A schedule as GET /schedules sends it (see src/http/routes/schedules.ts). */
interface ScheduleView {
  queue: string;
  id: string;
  cron: string;
  tz: string;
  name: string;
  data: unknown;
  options: Record<string, unknown>;
  misfire: { policy: string };
  lastTickAt: string | null;
  nextRunAt: string | null;
  updatedAt: string;
}

/** The longest wait before the list is read again when no next run comes sooner, ms. */
const MAX_IDLE_MS = 60_000;

/** "in 3 min 2 s" for a future time, "due" for a past one. */
function until(iso: string | null, now: number): string {
  if (!iso) return "never";
  const ms = Date.parse(iso) - now;
  return ms <= 0 ? "due" : `in ${ago(new Date(now - ms).toISOString(), now).replace(/ ago$/, "")}`;
}

export function SchedulesPage() {
  const [schedules, setSchedules] = useState<ScheduleView[] | null>(null);
  const [message, setMessage] = useState<{ kind: "info" | "error"; text: string } | null>(null);
  const [reload, setReload] = useState(0);
  const [now, setNow] = useState(Date.now());

  useEffect(() => {
    let cancelled = false;
    call<{ schedules: ScheduleView[] }>("GET", "/schedules")
      .then((r) => {
        if (cancelled) return;
        setSchedules(r.schedules);
        setNow(Date.now());
      })
      .catch((e: unknown) => !cancelled && setMessage({ kind: "error", text: e instanceof ApiError ? e.message : String(e) }));
    return () => {
      cancelled = true;
    };
  }, [reload]);

  // Read again just after the soonest next run (its last run then moves): one request per tick, not a poll loop.
  useEffect(() => {
    if (schedules === null) return;
    const soonest = Math.min(MAX_IDLE_MS, ...schedules.map((s) => (s.nextRunAt ? Date.parse(s.nextRunAt) - Date.now() + 1_000 : MAX_IDLE_MS)));
    const timer = setTimeout(() => setReload((n) => n + 1), Math.max(1_000, soonest));
    return () => clearTimeout(timer);
  }, [schedules]);

  const mayRun = can("enqueue");
  const mayDelete = can("admin");
  return (
    <section aria-labelledby="title">
      <div class="title-row">
        <h1 id="title">Schedules</h1>
      </div>
      {message && <Notice kind={message.kind}>{message.text}</Notice>}
      {schedules === null ? (
        <p>Loading…</p>
      ) : schedules.length === 0 ? (
        <Notice>No cron schedules. Create one with queue.schedule(), conveyor schedules set, or PUT /v1/queues/&lt;queue&gt;/schedules/&lt;id&gt;.</Notice>
      ) : (
        <div class="table-wrap">
          <table class="schedules" aria-label="Cron schedules, by queue then id">
            <thead>
              <tr>
                <th scope="col">Schedule</th>
                <th scope="col">Queue</th>
                <th scope="col">Pattern</th>
                <th scope="col">Job</th>
                <th scope="col">Last run</th>
                <th scope="col">Next run</th>
                {(mayRun || mayDelete) && <th scope="col">Actions</th>}
              </tr>
            </thead>
            <tbody>
              {schedules.map((s) => (
                <tr key={`${s.queue}\n${s.id}`}>
                  <th scope="row" class="mono">
                    {s.id}
                    <details>
                      <summary>Payload and options</summary>
                      <JsonBlock value={{ data: s.data, options: s.options, misfire: s.misfire }} label={`Payload and options of schedule ${s.id}`} />
                    </details>
                  </th>
                  <td>
                    <a href={`#/queues/${enc(s.queue)}`}>{s.queue}</a>
                  </td>
                  <td class="mono">
                    {s.cron} <span class="dim">({s.tz})</span>
                  </td>
                  <td class="mono">{s.name}</td>
                  <td>{time(s.lastTickAt)}</td>
                  <td>
                    <span class="next-run">{time(s.nextRunAt)}</span> <span class="dim">{until(s.nextRunAt, now)}</span>
                  </td>
                  {(mayRun || mayDelete) && (
                    <td class="actions">
                      {mayRun && (
                        <ActionButton
                          label="Run now"
                          title={`Run now: schedule ${s.id} of ${s.queue}`}
                          run={() =>
                            call<{ jobId: string }>("POST", `/queues/${enc(s.queue)}/jobs`, {
                              name: s.name,
                              data: s.data,
                              options: {
                                ...s.options,
                                meta: { ...((s.options.meta as Record<string, unknown> | undefined) ?? {}), triggeredBySchedule: { queue: s.queue, id: s.id } },
                              },
                            })
                          }
                          onDone={(r) => setMessage({ kind: "info", text: `Enqueued job ${(r as { jobId: string }).jobId} from schedule ${s.id}.` })}
                        />
                      )}
                      {mayDelete && (
                        <ActionButton
                          label="Delete"
                          kind="danger"
                          title={`Delete schedule ${s.id} of ${s.queue}`}
                          confirm={`Delete schedule ${s.id} of ${s.queue}? The jobs it enqueued stay.`}
                          run={() => call("DELETE", `/queues/${enc(s.queue)}/schedules/${enc(s.id)}`)}
                          onDone={() => {
                            setMessage({ kind: "info", text: `Deleted schedule ${s.id}.` });
                            setReload((n) => n + 1);
                          }}
                        />
                      )}
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <p class="hint">Pausing a schedule is not offered: the stores keep no paused state for schedules. Delete it and set it again to stop and restart it.</p>
    </section>
  );
}
