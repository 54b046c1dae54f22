/** Small pieces shared by the views. Job data is only ever rendered as text nodes. */
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError } from "./api";
import { count, json, SHOWN_CHARS } from "./format";

export function StateBadge({ state }: { state: string }) {
  return <span class={`badge state-${state}`}>{state}</span>;
}

/** JSON shown as text in a <pre>, cut at SHOWN_CHARS with a note. */
export function JsonBlock({ value, label }: { value: unknown; label: string }) {
  const { text, total } = json(value);
  return (
    <div class="json">
      <pre tabIndex={0} aria-label={label}>
        {text}
      </pre>
      {total > SHOWN_CHARS && (
        <p class="note">
          Showing the first {count(SHOWN_CHARS)} of {count(total)} characters.
        </p>
      )}
    </div>
  );
}

/** A button that runs an action, shows it running, and reports the server's refusal. */
export function ActionButton({
  label,
  run,
  confirm,
  kind = "normal",
  onDone,
  title,
}: {
  label: string;
  run: () => Promise<unknown>;
  confirm?: string;
  kind?: "normal" | "danger";
  onDone?: (result: unknown) => void;
  /** Accessible name when the label alone is ambiguous (it must contain the label). */
  title?: string;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const click = async () => {
    if (confirm && !window.confirm(confirm)) return;
    setBusy(true);
    setError(null);
    try {
      const result = await run();
      onDone?.(result);
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <span class="action">
      <button type="button" class={`btn btn-${kind}`} disabled={busy} onClick={() => void click()} {...(title ? { "aria-label": title } : {})}>
        {busy ? `${label}…` : label}
      </button>
      {error && (
        <span class="error" role="alert">
          {error}
        </span>
      )}
    </span>
  );
}

export function Notice({ kind = "info", children }: { kind?: "info" | "error"; children: ComponentChildren }) {
  return (
    <p class={`notice notice-${kind}`} role={kind === "error" ? "alert" : "status"}>
      {children}
    </p>
  );
}

export function LiveDot({ connected }: { connected: boolean }) {
  return (
    <span class={`live ${connected ? "on" : "off"}`} role="status">
      {connected ? "live" : "reconnecting…"}
    </span>
  );
}

/** The "Job name" filter form: applies on submit; "clear" shows while a name is applied. */
export function NameFilter({
  id,
  label,
  applied,
  onApply,
  clearHref,
}: {
  id: string;
  label: string;
  applied: string;
  onApply: (name: string) => void;
  clearHref: string;
}) {
  const [value, setValue] = useState(applied);
  useEffect(() => setValue(applied), [applied]);
  return (
    <form
      role="search"
      aria-label={label}
      onSubmit={(e) => {
        e.preventDefault();
        onApply(value.trim());
      }}
    >
      <label for={id}>Job name</label>
      <input id={id} value={value} onInput={(e) => setValue(e.currentTarget.value)} placeholder="e.g. send-email" maxLength={128} />
      <button type="submit" class="btn">
        Filter
      </button>
      {applied && (
        <a class="clear" href={clearHref}>
          clear
        </a>
      )}
    </form>
  );
}
