/** A queue's dead letters with their forensics: replay one, the selected, or all matching; delete. */
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, enc, useLive, type JobView, type MinuteSample, type QueueView } from "./api";
import { count, time } from "./format";
import { go, withParams } from "./router";
import { QueueHeader } from "./queue";
import { ActionButton, JsonBlock, Notice, NameFilter } from "./widgets";

const PAGE = 20;

export function DeadPage({ queue, params }: { queue: string; params: URLSearchParams }) {
  const live = useLive<{ queue: QueueView; history: MinuteSample[] }>(`topic=queue&queue=${enc(queue)}`);
  const name = params.get("name") ?? "";
  const after = params.get("after") ?? "";
  const [jobs, setJobs] = useState<JobView[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [message, setMessage] = useState<{ kind: "info" | "error"; text: string } | null>(null);
  const deadCount = live.data?.queue.counts.dead;
  const [reload, setReload] = useState(0);

  useEffect(() => {
    let cancelled = false;
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (name) q.set("name", name);
    if (after) q.set("after", after);
    call<{ jobs: JobView[]; next: string | null }>("GET", `/queues/${enc(queue)}/dead?${q}`)
      .then((r) => {
        if (cancelled) return;
        setJobs(r.jobs);
        setNext(r.next);
        setSelected((s) => new Set([...s].filter((id) => r.jobs.some((j) => j.id === id))));
      })
      .catch((e: unknown) => !cancelled && setMessage({ kind: "error", text: e instanceof ApiError ? e.message : String(e) }));
    return () => {
      cancelled = true;
    };
  }, [queue, name, after, deadCount, reload]);

  const link = (changes: Record<string, string | null>) => withParams(`#/queues/${enc(queue)}/dead`, params, changes);
  const replayed = (r: unknown) => {
    const out = r as { replayed: string[]; notDead: string[]; notFound: string[] };
    setMessage({
      kind: "info",
      text: `Replayed ${count(out.replayed.length)} job(s)${out.notDead.length ? `; ${out.notDead.length} were no longer dead` : ""}${out.notFound.length ? `; ${out.notFound.length} not found` : ""}.`,
    });
    setSelected(new Set());
    setReload((n) => n + 1);
  };
  const toggle = (id: string) =>
    setSelected((s) => {
      const next = new Set(s);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });

  return (
    <section aria-labelledby="title">
      <p class="crumbs">
        <a href="#/">Queues</a> / <a href={`#/queues/${enc(queue)}`}>{queue}</a> / dead letters
      </p>
      <QueueHeader queue={queue} live={live.data?.queue ?? null} connected={live.connected} />
      <h2>Dead letters {deadCount !== undefined && <span class="count">({count(deadCount)})</span>}</h2>
      <div class="filters">
        <NameFilter
          id="dead-name"
          label="Filter dead letters by job name"
          applied={name}
          onApply={(n) => go(link({ name: n, after: null }))}
          clearHref={link({ name: null, after: null })}
        />
      </div>
      <div class="actions bulk">
        <ActionButton
          label={`Replay selected (${selected.size})`}
          run={async () =>
            selected.size === 0
              ? Promise.reject(new ApiError(400, "select dead letters first"))
              : call("POST", `/queues/${enc(queue)}/dead/replay`, { ids: [...selected] })
          }
          onDone={replayed}
        />
        <ActionButton
          label={name ? `Replay all named ${name}` : "Replay all"}
          confirm={`Replay every dead job of ${queue}${name ? ` named ${name}` : ""} (up to 1000)?`}
          run={() => call("POST", `/queues/${enc(queue)}/dead/replay`, { all: true, limit: 1000, ...(name ? { name } : {}) })}
          onDone={replayed}
        />
      </div>
      {message && <Notice kind={message.kind}>{message.text}</Notice>}
      {jobs === null ? (
        <p>Loading…</p>
      ) : jobs.length === 0 ? (
        <Notice>No dead letters{name ? ` named ${name}` : ""}.</Notice>
      ) : (
        <ul class="dead-list">
          {jobs.map((j) => (
            <li key={j.id} class="dead">
              <div class="dead-head">
                <input type="checkbox" id={`sel-${j.id}`} checked={selected.has(j.id)} onChange={() => toggle(j.id)} />
                <label for={`sel-${j.id}`} class="mono">
                  {j.name} <span class="dim">{j.id}</span>
                </label>
                <a href={`#/jobs/${enc(j.id)}`} aria-label={`details of job ${j.id}`}>
                  details
                </a>
                <span class="dim">
                  died {time(j.timings.finishedAt)} after {j.attempts.made} attempt(s){j.replays ? `, replayed ${j.replays}×` : ""}
                </span>
                <span class="spacer" />
                <ActionButton
                  label="Replay"
                  title={`Replay job ${j.id}`}
                  run={() => call("POST", `/jobs/${enc(j.id)}/replay`)}
                  onDone={() => replayed({ replayed: [j.id], notDead: [], notFound: [] })}
                />
                <ActionButton
                  label="Delete"
                  kind="danger"
                  title={`Delete job ${j.id}`}
                  confirm="Delete this dead job for good?"
                  run={() => call("DELETE", `/queues/${enc(queue)}/dead/${enc(j.id)}`)}
                  onDone={() => setReload((n) => n + 1)}
                />
              </div>
              {j.failure && (
                <p class="error-line">
                  <strong>{j.failure.name}</strong>: {j.failure.message}
                </p>
              )}
              <details>
                <summary>Forensics: payload, stack, attempts</summary>
                <h3>Payload</h3>
                <JsonBlock value={j.data} label={`Payload of ${j.id}`} />
                {j.failure?.stack && (
                  <>
                    <h3>Stack</h3>
                    <pre class="stack">{j.failure.stack}</pre>
                  </>
                )}
                <h3>Attempts</h3>
                <ol class="attempts">
                  {(j.history ?? []).map((a, i) => (
                    <li key={i}>
                      Attempt {a.attempt}: {a.outcome} on <span class="mono">{a.host}</span> pid {a.pid}, {time(a.startedAt)}
                      {a.error ? ` — ${a.error.name}: ${a.error.message}` : ""}
                    </li>
                  ))}
                </ol>
              </details>
            </li>
          ))}
        </ul>
      )}
      <nav class="pager" aria-label="Pages">
        {after ? <a href={link({ after: null })}>← Newest</a> : <span />}
        <span />
        {next ? <a href={link({ after: next })}>Older →</a> : <span />}
      </nav>
    </section>
  );
}
