/** One queue: its counts and charts, and its jobs by state, filtered by name, searched by id. */
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, can, enc, STATES, useLive, type JobState, type JobView, type MinuteSample, type QueueView } from "./api";
import { QueueCharts } from "./charts";
import { ago, count, duration } from "./format";
import { PauseButton } from "./overview";
import { go, withParams } from "./router";
import { LiveDot, Notice, StateBadge, NameFilter } from "./widgets";

const PAGE = 50;

export function QueueHeader({ queue, live, connected }: { queue: string; live: QueueView | null; connected: boolean }) {
  return (
    <div class="title-row">
      <h1 id="title">
        Queue <span class="mono">{queue}</span>
      </h1>
      {live && (live.paused ? <span class="badge paused">paused</span> : <span class="badge running">running</span>)}
      {live && <PauseButton queue={live} />}
      <LiveDot connected={connected} />
    </div>
  );
}

export function QueuePage({ queue, params }: { queue: string; params: URLSearchParams }) {
  const live = useLive<{ queue: QueueView; history: MinuteSample[] }>(`topic=queue&queue=${enc(queue)}`);
  const state = (params.get("state") as JobState | null) ?? null;
  const name = params.get("name") ?? "";
  const after = params.get("after") ?? "";
  const before = params.get("before") ?? "";
  const from = params.get("from") ?? "";
  const until = params.get("until") ?? "";
  const [jobs, setJobs] = useState<JobView[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [prev, setPrev] = useState<string | null>(null);
  const [fromInput, setFromInput] = useState(from);
  const [untilInput, setUntilInput] = useState(until);
  const [error, setError] = useState<string | null>(null);
  const [idInput, setIdInput] = useState("");
  const counts = live.data?.queue.counts;
  // On the first page the list follows the live counts; further pages stay put while you read.
  const followKey = after === "" && before === "" && counts ? JSON.stringify(counts) : "";

  useEffect(() => {
    let cancelled = false;
    // Pages go by keyset cursor (`after` older, `before` newer), so the thousandth page costs what the first does.
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (state) q.set("state", state);
    if (name) q.set("name", name);
    if (after) q.set("after", after);
    if (before) q.set("before", before);
    if (from) q.set("createdFrom", localToIso(from));
    if (until) q.set("createdUntil", localToIso(until));
    call<{ jobs: JobView[]; next: string | null; prev?: string | null }>("GET", `/queues/${enc(queue)}/jobs?${q}`)
      .then((r) => {
        if (cancelled) return;
        setJobs(r.jobs);
        setNext(r.next);
        setPrev(r.prev ?? null);
        setError(null);
      })
      .catch((e: unknown) => !cancelled && setError(e instanceof ApiError ? e.message : String(e)));
    return () => {
      cancelled = true;
    };
  }, [queue, state, name, after, before, from, until, followKey]);

  useEffect(() => setFromInput(from), [from]);
  useEffect(() => setUntilInput(until), [until]);

  const link = (changes: Record<string, string | null>) => withParams(`#/queues/${enc(queue)}`, params, changes);

  const searchId = async (e: Event) => {
    e.preventDefault();
    const id = idInput.trim();
    if (!id) return;
    try {
      await call("GET", `/jobs/${enc(id)}`);
      go(`#/jobs/${enc(id)}`);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 404 ? `No job with id ${id}.` : String(err));
    }
  };

  return (
    <section aria-labelledby="title">
      <p class="crumbs">
        <a href="#/">Queues</a> / {queue}
      </p>
      <QueueHeader queue={queue} live={live.data?.queue ?? null} connected={live.connected} />
      {live.data && (
        <dl class="facts">
          <div>
            <dt>Oldest waiting</dt>
            <dd>{duration(live.data.queue.oldestWaitingAgeMs)}</dd>
          </div>
          <div>
            <dt>Dead letters</dt>
            <dd>
              {can("admin") ? (
                <a href={`#/queues/${enc(queue)}/dead`}>{count(live.data.queue.counts.dead)} — inspect and replay</a>
              ) : (
                count(live.data.queue.counts.dead)
              )}
            </dd>
          </div>
        </dl>
      )}
      {live.data && <QueueCharts history={live.data.history.slice(-60)} />}

      <h2>Jobs</h2>
      <nav class="tabs" aria-label="Job state">
        <a href={link({ state: null, after: null, before: null })} aria-current={state === null ? "page" : undefined}>
          all
        </a>
        {STATES.map((s) => (
          <a key={s} href={link({ state: s, after: null, before: null })} aria-current={state === s ? "page" : undefined}>
            {s} <span class="count">{counts ? count(counts[s]) : ""}</span>
          </a>
        ))}
      </nav>
      <div class="filters">
        <NameFilter
          id="name-filter"
          label="Filter by job name"
          applied={name}
          onApply={(n) => go(link({ name: n, after: null, before: null }))}
          clearHref={link({ name: null, after: null, before: null })}
        />
        <form
          role="search"
          aria-label="Filter by creation time"
          onSubmit={(e) => {
            e.preventDefault();
            go(link({ from: fromInput, until: untilInput, after: null, before: null }));
          }}
        >
          <label for="created-from">Created from</label>
          <input id="created-from" type="datetime-local" step="1" value={fromInput} onInput={(e) => setFromInput(e.currentTarget.value)} />
          <label for="created-until">until</label>
          <input id="created-until" type="datetime-local" step="1" value={untilInput} onInput={(e) => setUntilInput(e.currentTarget.value)} />
          <button type="submit" class="btn">
            Apply
          </button>
          {(from || until) && (
            <a class="clear" href={link({ from: null, until: null, after: null, before: null })}>
              clear
            </a>
          )}
        </form>
        <form role="search" aria-label="Find a job by id" onSubmit={(e) => void searchId(e)}>
          <label for="id-search">Job id</label>
          <input id="id-search" value={idInput} onInput={(e) => setIdInput(e.currentTarget.value)} maxLength={255} />
          <button type="submit" class="btn">
            Open
          </button>
        </form>
      </div>
      {error && <Notice kind="error">{error}</Notice>}
      {jobs === null ? (
        <p>Loading…</p>
      ) : jobs.length === 0 ? (
        <Notice>
          No jobs{state ? ` in state ${state}` : ""}
          {name ? ` named ${name}` : ""}
          {from || until ? " created in that time range" : ""}
          {after || before ? " on this page" : ""}.
        </Notice>
      ) : (
        <JobTable jobs={jobs} />
      )}
      <nav class="pager" aria-label="Pages">
        {after || before ? <a href={link({ after: null, before: null })}>⇤ Newest</a> : <span />}
        {prev ? <a href={link({ after: null, before: prev })}>← Newer</a> : <span />}
        {next ? <a href={link({ after: next, before: null })}>Older →</a> : <span />}
      </nav>
    </section>
  );
}

export function JobTable({ jobs }: { jobs: JobView[] }) {
  const now = Date.now();
  return (
    <div class="table-wrap">
      <table class="jobs">
        <thead>
          <tr>
            <th scope="col">Job</th>
            <th scope="col">Name</th>
            <th scope="col">State</th>
            <th scope="col" class="num">
              Attempts
            </th>
            <th scope="col">Created</th>
            <th scope="col" class="num">
              Wait
            </th>
            <th scope="col" class="num">
              Run
            </th>
            <th scope="col">Last error</th>
          </tr>
        </thead>
        <tbody>
          {jobs.map((j) => (
            <tr key={j.id}>
              <th scope="row" class="mono">
                <a href={`#/jobs/${enc(j.id)}`}>{j.id}</a>
              </th>
              <td class="mono">{j.name}</td>
              <td>
                <StateBadge state={j.state} />
              </td>
              <td class="num">
                {j.attempts.made}/{j.attempts.max}
              </td>
              <td title={j.timings.createdAt ?? undefined}>{ago(j.timings.createdAt, now)}</td>
              <td class="num">{duration(j.timings.waitMs)}</td>
              <td class="num">{duration(j.timings.runMs)}</td>
              <td class="clip">{j.error ? `${j.error.name}: ${j.error.message}` : ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A datetime-local value (the browser's time zone) as RFC 3339. */
function localToIso(value: string): string {
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? value : new Date(ms).toISOString();
}
