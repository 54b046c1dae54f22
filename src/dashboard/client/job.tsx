/** One job: state, live progress, payload, result, attempts with errors and stacks, timings, lease. */
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, can, currentSession, enc, useLive, type FlowView, type JobView } from "./api";
import { duration, time } from "./format";
import { ActionButton, JsonBlock, LiveDot, Notice, StateBadge } from "./widgets";

/** A number 0-100, or { percent } / { done, total }: shown as a bar; anything else as JSON. */
function percentOf(progress: unknown): number | null {
  if (typeof progress === "number" && progress >= 0 && progress <= 100) return progress;
  if (progress && typeof progress === "object") {
    const p = progress as { percent?: unknown; done?: unknown; total?: unknown };
    if (typeof p.percent === "number" && p.percent >= 0 && p.percent <= 100) return p.percent;
    if (typeof p.done === "number" && typeof p.total === "number" && p.total > 0) return Math.min(100, (100 * p.done) / p.total);
  }
  return null;
}

function mayCancel(job: JobView): boolean {
  const who = currentSession()?.principal;
  // An enqueue key may cancel the jobs it added; the server decides, so only admin sees the button.
  return !job.finished && who !== null && who !== undefined && can("admin");
}

/**
 * The job's flow (GET /jobs/{id}/flow): its parent and its children with their states. Read again
 * whenever the live job changes, and every 2 s while a child is unsettled (a child's change does
 * not touch the parent's record).
 */
function FlowSection({ id, version }: { id: string; version: unknown }) {
  const [flow, setFlow] = useState<FlowView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let gone = false;
    call<FlowView>("GET", `/jobs/${enc(id)}/flow`).then(
      (f) => {
        if (gone) return;
        setFlow(f);
        setError(null);
      },
      (e: unknown) => {
        if (!gone) setError(e instanceof ApiError ? e.message : String(e));
      },
    );
    return () => {
      gone = true;
    };
  }, [id, version, tick]);
  const unsettled = flow?.children.some((c) => !c.settled) === true;
  useEffect(() => {
    if (!unsettled) return;
    const timer = setTimeout(() => setTick((t) => t + 1), 2_000);
    return () => clearTimeout(timer);
  }, [unsettled, tick]);
  if (error) return <Notice kind="error">Could not read this job's flow: {error}</Notice>;
  if (!flow || (flow.parent === null && flow.children.length === 0)) return null;
  const settled = flow.children.filter((c) => c.settled).length;
  return (
    <section aria-labelledby="flow-title">
      <h2 id="flow-title">Flow</h2>
      {flow.parent && (
        <p>
          Parent:{" "}
          <a href={`#/jobs/${enc(flow.parent.id)}`} class="mono">
            {flow.parent.id}
          </a>{" "}
          <span class="dim">in {flow.parent.queue}</span>
        </p>
      )}
      {flow.children.length > 0 && (
        <>
          <p class="dim">
            {flow.children.length} children, {settled} settled
            {flow.onChildFailure ? `; a failed child ${flow.onChildFailure === "fail" ? "fails the parent" : "lets the parent run"}` : ""}.
          </p>
          <div class="table-wrap">
            <table class="jobs" aria-label="Children">
              <thead>
                <tr>
                  <th scope="col">Child</th>
                  <th scope="col">Queue</th>
                  <th scope="col">Name</th>
                  <th scope="col">State</th>
                  <th scope="col">Outcome</th>
                </tr>
              </thead>
              <tbody>
                {flow.children.map((c) => (
                  <tr key={c.id}>
                    <td class="mono">
                      <a href={`#/jobs/${enc(c.id)}`}>{c.id}</a>
                    </td>
                    <td>{c.queue}</td>
                    <td class="mono">{c.name}</td>
                    <td>
                      <StateBadge state={c.state} />
                    </td>
                    <td>{c.error ? `${c.error.name}: ${c.error.message}` : c.settled ? "done" : "—"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}

export function JobPage({ id }: { id: string }) {
  const live = useLive<{ job: (JobView & { lease?: JobView["lease"] }) | null }>(`topic=job&id=${enc(id)}`);
  if (!live.data) return <p>Loading…</p>;
  const job = live.data.job;
  if (!job) {
    return (
      <section aria-labelledby="title">
        <h1 id="title">Job not found</h1>
        <Notice kind="error">No job with this id: it never existed, or it was deleted after its retention period.</Notice>
      </section>
    );
  }
  const pct = percentOf(job.progress);
  return (
    <section aria-labelledby="title">
      <p class="crumbs">
        <a href="#/">Queues</a> / <a href={`#/queues/${enc(job.queue)}`}>{job.queue}</a> / job
      </p>
      <div class="title-row">
        <h1 id="title">
          <span class="mono">{job.name}</span> <span class="mono dim">{job.id}</span>
        </h1>
        <StateBadge state={job.state} />
        <LiveDot connected={live.connected} />
      </div>
      <div class="actions">
        {mayCancel(job) && (
          <ActionButton
            label="Cancel job"
            kind="danger"
            confirm="Cancel this job? A running handler is aborted at its worker's next heartbeat."
            run={() => call("DELETE", `/jobs/${enc(job.id)}`)}
          />
        )}
        {job.state === "dead" && can("admin") && <ActionButton label="Replay" run={() => call("POST", `/jobs/${enc(job.id)}/replay`)} />}
      </div>

      <FlowSection id={job.id} version={live.data} />

      <h2>Progress</h2>
      {job.progress === null ? (
        <p class="dim">No progress reported.</p>
      ) : (
        <div class="progress-box">
          {pct !== null && (
            <p class="progress-line">
              <progress max={100} value={pct} aria-label="Progress" /> <strong>{pct.toFixed(pct < 10 ? 1 : 0)}%</strong>
            </p>
          )}
          <JsonBlock value={job.progress} label="Progress value" />
        </div>
      )}

      <div class="grid2">
        <div>
          <h2>Timings</h2>
          <dl class="kv">
            <dt>Created</dt>
            <dd>{time(job.timings.createdAt)}</dd>
            <dt>Due</dt>
            <dd>{time(job.timings.runAt)}</dd>
            <dt>Started</dt>
            <dd>{time(job.timings.startedAt)}</dd>
            <dt>Finished</dt>
            <dd>{time(job.timings.finishedAt)}</dd>
            <dt>Waited</dt>
            <dd>{duration(job.timings.waitMs)}</dd>
            <dt>Ran</dt>
            <dd>{duration(job.timings.runMs)}</dd>
          </dl>
        </div>
        <div>
          <h2>Execution</h2>
          <dl class="kv">
            <dt>Attempts</dt>
            <dd>
              {job.attempts.made} of {job.attempts.max}
            </dd>
            <dt>Priority</dt>
            <dd>{job.priority}</dd>
            {job.replays !== undefined && (
              <>
                <dt>Replays</dt>
                <dd>{job.replays}</dd>
                <dt>Stalls</dt>
                <dd>{job.stalls}</dd>
              </>
            )}
            <dt>Lease</dt>
            <dd>{job.lease ? `token ${job.lease.token}, expires ${time(job.lease.expiresAt)}` : "none (not running)"}</dd>
            <dt>Worker</dt>
            <dd class="mono">{job.lease ? `${job.lease.worker.id} on ${job.lease.worker.host} (pid ${job.lease.worker.pid})` : "—"}</dd>
          </dl>
        </div>
      </div>

      {job.error && (
        <>
          <h2>Last error</h2>
          <p class="error-line">
            <strong>{job.error.name}</strong>: {job.error.message}
          </p>
          {job.failure?.stack && <pre class="stack">{job.failure.stack}</pre>}
        </>
      )}

      <h2>Payload</h2>
      {job.data !== undefined ? <JsonBlock value={job.data} label="Payload" /> : <p class="dim">Payloads are shown to admin keys only.</p>}
      {job.meta ? (
        <>
          <h3>Metadata</h3>
          <JsonBlock value={job.meta} label="Metadata" />
        </>
      ) : null}
      <h2>Result</h2>
      {job.result === null ? <p class="dim">No result{job.finished ? "" : " yet"}.</p> : <JsonBlock value={job.result} label="Result" />}

      <h2>Attempts</h2>
      {job.history === undefined ? (
        <p class="dim">The attempt history is shown to admin keys only.</p>
      ) : job.history.length === 0 ? (
        <p class="dim">No finished attempt yet.</p>
      ) : (
        <ol class="attempts">
          {job.history.map((a, i) => (
            <li key={i}>
              <p>
                <strong>Attempt {a.attempt}</strong> <StateBadge state={a.outcome} /> {time(a.startedAt)} → {time(a.finishedAt)} (
                {a.finishedAt && a.startedAt ? duration(Date.parse(a.finishedAt) - Date.parse(a.startedAt)) : "—"}) on{" "}
                <span class="mono">
                  {a.workerId} {a.host} pid {a.pid}
                </span>
              </p>
              {a.error && (
                <details>
                  <summary>
                    {a.error.name}: {a.error.message}
                  </summary>
                  {a.error.stack ? <pre class="stack">{a.error.stack}</pre> : <p class="dim">No stack.</p>}
                </details>
              )}
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}
