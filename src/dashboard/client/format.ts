/** How numbers, times and JSON are shown. Everything here returns plain text. */

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = s / 60;
  if (m < 60) return `${Math.floor(m)} min ${Math.round(s % 60)} s`;
  const h = m / 60;
  if (h < 48) return `${Math.floor(h)} h ${Math.round(m % 60)} min`;
  return `${Math.floor(h / 24)} d ${Math.round(h % 24)} h`;
}

export function count(n: number): string {
  return n.toLocaleString("en-US");
}

export function time(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return "—";
  return `${duration(Math.max(0, now - Date.parse(iso)))} ago`;
}

/** Longest JSON text shown at once; more is cut with a note (a 1 MB payload would freeze the page). */
export const SHOWN_CHARS = 20_000;

export function json(value: unknown): { text: string; total: number } {
  let text: string;
  try {
    text = JSON.stringify(value, null, 2) ?? "null";
  } catch {
    text = String(value);
  }
  return { text: text.length > SHOWN_CHARS ? text.slice(0, SHOWN_CHARS) : text, total: text.length };
}
