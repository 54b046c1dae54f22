/** The queues: depth by state, oldest waiting age, last hour's throughput and failure rate, paused. */
import { call, can, currentSession, enc, STATES, useLive, type MinuteSample, type QueueView } from "./api";
import { Sparkline } from "./charts";
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
        <Notice>Throughput and failure history come from workers running in this server process (conveyor serve --handlers); none is attached, so the sparklines stay flat.</Notice>
      )}
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
                <th scope="col" class="num">Oldest waiting</th>
                <th scope="col">Completed / min (1 h)</th>
                <th scope="col">Failure rate (1 h)</th>
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
                        {s === "dead" && q.counts.dead > 0 && can("admin") ? <a href={`#/queues/${enc(q.name)}/dead`}>{count(q.counts.dead)}</a> : count(q.counts[s])}
                      </td>
                    ))}
                    <td class={`num ${q.oldestWaitingAgeMs !== null && q.oldestWaitingAgeMs > 60_000 ? "warn" : ""}`}>{duration(q.oldestWaitingAgeMs)}</td>
                    <td>
                      <Sparkline values={done} label={`${q.name}: ${count(lastHourDone)} completed in the last hour`} />
                    </td>
                    <td>
                      <Sparkline
                        values={rate}
                        max={1}
                        tone="bad"
                        label={`${q.name}: ${lastHourDone + lastHourFailed === 0 ? "no attempts" : `${((100 * lastHourFailed) / (lastHourDone + lastHourFailed)).toFixed(1)}% of attempts failed`} in the last hour`}
                      />
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
