/**
 * The demo's terminal output: an aligned grid, short durations, and a dead job's forensics (the
 * same facts `conveyor dlq show` prints), written with the package's public types only.
 */
import type { JobRecord } from "conveyor-jobs";

type Cell = string | number | null;

/** Columns padded to their widest cell; `null` shows as "-". */
export function grid(headers: string[], rows: Cell[][]): string {
  const text = [headers, ...rows.map((row) => row.map((cell) => (cell === null ? "-" : String(cell))))];
  const width = (column: number) => Math.max(...text.map((row) => (row[column] ?? "").length));
  const widths = headers.map((_, column) => width(column));
  const render = (row: string[]) =>
    row
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join("  ")
      .trimEnd();
  return [render(text[0]!), render(widths.map((w) => "─".repeat(w))), ...text.slice(1).map(render)].join("\n");
}

/** 820ms, 4.2s, 3m 5s. */
export function shortDuration(ms: number | null): string {
  if (ms === null) return "-";
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)}s`;
  return `${Math.floor(ms / 60_000)}m ${Math.floor((ms % 60_000) / 1_000)}s`;
}

/** What a dead letter keeps: payload, the final error, and every attempt with its worker. */
export function forensics(job: JobRecord): string {
  const iso = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString());
  return [
    `${job.queue} / ${job.name}  ${job.id}  (${job.state} after attempt ${job.attempt} of ${job.maxAttempts})`,
    `payload   ${JSON.stringify(job.data)}`,
    `error     ${job.error ? `${job.error.name}: ${job.error.message}` : "-"}`,
    `created   ${iso(job.createdAt)}   finished ${iso(job.finishedAt)}`,
    "attempts",
    grid(
      ["#", "outcome", "worker", "pid", "took", "error"],
      job.history.map((a) => [
        a.attempt,
        a.outcome,
        a.workerId,
        a.pid,
        shortDuration(a.finishedAt - a.startedAt),
        a.error ? a.error.message.slice(0, 60) : null,
      ]),
    )
      .split("\n")
      .map((line) => `  ${line}`)
      .join("\n"),
  ].join("\n");
}
