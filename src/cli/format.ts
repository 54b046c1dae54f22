import { shown } from "../core/shown.js";

/**
 * Characters a terminal acts on instead of printing: C0 controls (ESC starts a sequence; CR and
 * BS overwrite), DEL and C1 (U+009B is CSI, ESC [ in one character). The ones shown() escapes.
 */
const TERMINAL_CONTROLS = /[\u0000-\u001F\u007F-\u009F]/g;

/**
 * Text from the store (ids, queue and job names, error messages, worker ids, payload JSON) as a
 * terminal may print it: each control character escaped as shown() escapes it in error messages
 * (`\u009b`, `\u001b`, `\n`), everything else as is. Ids stored by an earlier version may hold
 * C1 characters, and error messages anything: printed raw they run as escape sequences
 * (recolour, move the cursor, rewrite the screen or the window title). An ordinary value prints
 * unchanged. `--json` output is not passed through this: it stays exact, for programs to read.
 */
export function printable(text: string): string {
  return text.replace(TERMINAL_CONTROLS, (c) => shown(c).slice(1, -1));
}

/** `printable` line by line: line breaks stay line breaks (a stack, a multi-line message), `indent` before each next line. */
export function printableLines(text: string, indent = ""): string {
  return text
    .split("\n")
    .map((line) => printable(line))
    .join(`\n${indent}`);
}

/**
 * Renders rows as an aligned text table for people; `--json` output bypasses this. Cells are
 * printed `printable`: a control character in a value neither runs nor breaks the alignment.
 */
export function table(headers: string[], rows: Array<Array<string | number | null>>): string {
  const cells = rows.map((r) => r.map((c) => (c === null ? "-" : printable(String(c)))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return [line(headers), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n");
}

/** "3.2s", "4m 10s", "2h 5m" — ages and durations at a glance. */
export function duration(ms: number | null): string {
  if (ms === null) return "-";
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function time(ms: number | null): string {
  return ms === null ? "-" : new Date(ms).toISOString();
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + "\n");
}
