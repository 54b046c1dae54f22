/**
 * Talking to the server: the HTTP API (with the session cookie and, for changes, the CSRF token)
 * and the page's one live stream.
 */
import { useEffect, useState } from "preact/hooks";

export interface SessionInfo {
  authRequired: boolean;
  principal: { id: string; scopes: string[] } | null;
  csrfToken: string | null;
  apiBasePath: string;
  historyAttached: boolean;
  /** Where the charts come from: the store (every worker of the fleet), this server's workers, or nothing. */
  historySource: "store" | "workers" | "none";
  sections: { schedules: boolean; relay: boolean };
}

// The server's own types (type-only imports: nothing of the server is bundled).
import type { JobState } from "../../core/job.js";
import type { DeadJobView, FlowView, JobView as ServerJobView, QueueView } from "../../http/views.js";
import type { MinuteSample } from "../history.js";

export type { FlowView, JobState, MinuteSample, QueueView };
export const STATES: JobState[] = ["waiting", "scheduled", "waiting-children", "active", "completed", "dead", "cancelled"];

/** A job as the live stream and listings send it: the status view, plus what admin keys see. */
export type JobView = ServerJobView &
  Partial<Pick<DeadJobView, "data" | "meta" | "failure" | "history" | "replays" | "stalls">> & {
    lease?: { token: number; expiresAt: string; worker: { id: string; host: string; pid: number } } | null;
  };

/** An answer the server refused, with its problem document's detail. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

let session: SessionInfo | null = null;
export function setSession(s: SessionInfo | null): void {
  session = s;
}
export function currentSession(): SessionInfo | null {
  return session;
}
export function can(scope: "read" | "enqueue" | "admin"): boolean {
  return session?.principal?.scopes.includes(scope) === true;
}

/** Calls the API (or the dashboard's own routes with `dashboard: true`). */
export async function call<T>(method: "GET" | "POST" | "DELETE", path: string, body?: unknown, dashboard = false): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && session?.csrfToken) headers["x-csrf-token"] = session.csrfToken;
  const url = dashboard ? path : `${session?.apiBasePath ?? "/v1"}${path}`;
  const res = await fetch(url, { method, headers, credentials: "same-origin", ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) {
    const detail = (json as { detail?: unknown } | null)?.detail;
    throw new ApiError(res.status, typeof detail === "string" ? detail : `the server answered ${res.status}`);
  }
  return json as T;
}

export const enc = encodeURIComponent;

export interface LiveState<T> {
  data: T | null;
  /** False while the stream is (re)connecting. */
  connected: boolean;
}

/** The page's one live stream: the latest snapshot of `query`'s topic. */
export function useLive<T>(query: string | null): LiveState<T> {
  const [state, setState] = useState<LiveState<T>>({ data: null, connected: false });
  useEffect(() => {
    setState({ data: null, connected: false });
    if (query === null) return;
    const source = new EventSource(`api/live?${query}`);
    source.addEventListener("open", () => setState((s) => ({ ...s, connected: true })));
    source.addEventListener("error", () => setState((s) => ({ ...s, connected: false })));
    source.addEventListener("snapshot", (event) => {
      setState({ data: JSON.parse((event as MessageEvent<string>).data) as T, connected: true });
    });
    return () => source.close();
  }, [query]);
  return state;
}
