/** The queues: depth by state, oldest waiting age, last hour's throughput and failure rate, paused. */
import { call, can, currentSession, enc, STATES, useLive, type MinuteSample, type QueueView } from "./api";
import { Sparkline, TimeChart } from "./charts";
import { count, duration } from "./format";
import { ActionButton, LiveDot, Notice } from "./widgets";

type Overview = { queues: Array<QueueView & { history: MinuteSample[] }> };

export function PauseButton({ queue }: { queue: QueueView }) {
  if (!can("admin")) return null;
  return queue.paused ? (
    <ActionButton label="Resume" title={`Resume queue ${queue.name}`} run={() => call("POST", `/queues/${enc(queue.name)}/resume`)} />
  ) : (
    <ActionButton label="Pause" title={`Pause queue ${queue.name}`} run={() => call("POST", `/queues/${enc(queue.name)}/pause`)} />
  );
}

export function OverviewPage() {
  const live = useLive<Overview>("topic=overview");
  const queues = live.data?.queues ?? null;
  return (
    <section aria-labelledby="title">
      <div class="title-row">
        <h1 id="title">Queues</h1>
        <LiveDot connected={live.connected} />
      </div>
      {!currentSession()?.historyAttached && (
        <Notice>
          This store keeps no finished jobs to chart, so throughput and failure history come from workers running in this server process (conveyor serve
          --handlers); none is attached, so the sparklines stay flat.
        </Notice>
      )}
      {queues !== null && queues.length > 0 && <Summary queues={queues} />}
      {queues === null ? (
        <p>Loading…</p>
      ) : queues.length === 0 ? (
        <Notice>No queues yet: enqueue a job and its queue appears here.</Notice>
      ) : (
        <div class="table-wrap">
          <table class="queues">
            <thead>
              <tr>
                <th scope="col">Queue</th>
                <th scope="col">Status</th>
                {STATES.map((s) => (
                  <th scope="col" class="num" key={s}>
                    {s}
                  </th>
                ))}
                <th scope="col" class="num">
                  Oldest waiting
                </th>
                <th scope="col">Completed, last hour</th>
                <th scope="col">Failed attempts, last hour</th>
                {can("admin") && <th scope="col">Actions</th>}
              </tr>
            </thead>
            <tbody>
              {queues.map((q) => {
                const done = q.history.map((h) => h.completed);
                const rate = q.history.map((h) => (h.completed + h.failed === 0 ? 0 : h.failed / (h.completed + h.failed)));
                const lastHourFailed = q.history.reduce((a, h) => a + h.failed, 0);
                const lastHourDone = q.history.reduce((a, h) => a + h.completed, 0);
                return (
                  <tr key={q.name}>
                    <th scope="row">
                      <a href={`#/queues/${enc(q.name)}`}>{q.name}</a>
                    </th>
                    <td>{q.paused ? <span class="badge paused">paused</span> : <span class="badge running">running</span>}</td>
                    {STATES.map((s) => (
                      <td class={`num ${s === "dead" && q.counts.dead > 0 ? "bad" : ""}`} key={s}>
                        {s === "dead" && q.counts.dead > 0 && can("admin") ? (
                          <a href={`#/queues/${enc(q.name)}/dead`}>{count(q.counts.dead)}</a>
                        ) : (
                          count(q.counts[s])
                        )}
                      </td>
                    ))}
                    <td class={`num ${q.oldestWaitingAgeMs !== null && q.oldestWaitingAgeMs > 60_000 ? "warn" : ""}`}>{duration(q.oldestWaitingAgeMs)}</td>
                    <td class="spark-cell">
                      <Sparkline values={done} label={`${q.name}: ${count(lastHourDone)} completed in the last hour`} />
                      <span class="spark-num">{count(lastHourDone)}</span>
                    </td>
                    <td class="spark-cell">
                      <Sparkline
                        values={rate}
                        max={1}
                        tone="bad"
                        label={`${q.name}: ${lastHourDone + lastHourFailed === 0 ? "no attempts" : `${failurePercent(lastHourFailed, lastHourDone)} of attempts failed`} in the last hour`}
                      />
                      <span class={`spark-num ${lastHourFailed > 0 ? "bad" : ""}`}>
                        {lastHourDone + lastHourFailed === 0 ? "—" : failurePercent(lastHourFailed, lastHourDone)}
                      </span>
                    </td>
                    {can("admin") && (
                      <td>
                        <PauseButton queue={q} />
                      </td>
                    )}
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function failurePercent(failed: number, completed: number): string {
  const p = (100 * failed) / (failed + completed);
  return `${p < 10 && p > 0 ? p.toFixed(1) : Math.round(p)}%`;
}

/** What needs attention first: totals, and the queues with dead jobs, long waits, or paused. */
function Summary({ queues }: { queues: Overview["queues"] }) {
  const sum = (pick: (q: QueueView) => number) => queues.reduce((a, q) => a + pick(q), 0);
  const oldest = Math.max(-1, ...queues.map((q) => q.oldestWaitingAgeMs ?? -1));
  const paused = queues.filter((q) => q.paused).map((q) => q.name);
  const withDead = queues.filter((q) => q.counts.dead > 0);
  const minutes = queues[0]?.history.map((h) => h.t) ?? [];
  const total = (pick: (h: MinuteSample) => number) => minutes.map((_t, i) => queues.reduce((a, q) => a + pick(q.history[i]!), 0));
  return (
    <>
      <ul class="cards" aria-label="Totals over every queue">
        <li>
          <span class="card-label">Waiting</span>
          <span class="card-value">{count(sum((q) => q.counts.waiting))}</span>
        </li>
        <li>
          <span class="card-label">Running</span>
          <span class="card-value">{count(sum((q) => q.counts.active))}</span>
        </li>
        <li>
          <span class="card-label">Scheduled</span>
          <span class="card-value">{count(sum((q) => q.counts.scheduled))}</span>
        </li>
        <li class={withDead.length > 0 ? "card-bad" : ""}>
          <span class="card-label">Dead</span>
          <span class="card-value">{count(sum((q) => q.counts.dead))}</span>
        </li>
        <li class={oldest > 60_000 ? "card-warn" : ""}>
          <span class="card-label">Oldest waiting</span>
          <span class="card-value">{oldest < 0 ? "none" : duration(oldest)}</span>
        </li>
        <li class={paused.length > 0 ? "card-warn" : ""}>
          <span class="card-label">Paused queues</span>
          <span class="card-value">{paused.length === 0 ? "none" : paused.length}</span>
        </li>
      </ul>
      {currentSession()?.historyAttached && (
        <div class="charts">
          <TimeChart
            title="Throughput, every queue (jobs per minute, last hour)"
            unit=""
            times={minutes}
            series={[
              { label: "completed", values: total((h) => h.completed), color: "#1a7f37" },
              { label: "failed", values: total((h) => h.failed), color: "#c62828" },
            ]}
          />
        </div>
      )}
    </>
  );
}
