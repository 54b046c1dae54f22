/** Hash routes (#/queues/q?state=dead): deep links work without server routes. */
import { useEffect, useState } from "preact/hooks";

export type Route =
  | { view: "overview" }
  | { view: "queue"; queue: string; params: URLSearchParams }
  | { view: "dead"; queue: string; params: URLSearchParams }
  | { view: "job"; id: string }
  | { view: "schedules" }
  | { view: "relay" }
  | { view: "missing" };

export function parse(hash: string): Route {
  const raw = hash.replace(/^#/, "") || "/";
  const [path = "/", query = ""] = raw.split("?", 2);
  const params = new URLSearchParams(query);
  const parts = path
    .split("/")
    .filter(Boolean)
    .map((p) => {
      try {
        return decodeURIComponent(p);
      } catch {
        return p;
      }
    });
  if (parts.length === 0) return { view: "overview" };
  if (parts[0] === "queues" && parts.length === 2) return { view: "queue", queue: parts[1]!, params };
  if (parts[0] === "queues" && parts.length === 3 && parts[2] === "dead") return { view: "dead", queue: parts[1]!, params };
  if (parts[0] === "jobs" && parts.length === 2) return { view: "job", id: parts[1]! };
  if (parts[0] === "schedules" && parts.length === 1) return { view: "schedules" };
  if (parts[0] === "relay" && parts.length === 1) return { view: "relay" };
  return { view: "missing" };
}

/** `path` with the current query `params` changed: a null or empty value removes the key. */
export function withParams(path: string, params: URLSearchParams, changes: Record<string, string | null>): string {
  const next = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === "") next.delete(k);
    else next.set(k, v);
  }
  const qs = next.toString();
  return `${path}${qs ? `?${qs}` : ""}`;
}

export function go(hash: string): void {
  window.location.hash = hash;
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(window.location.hash));
  useEffect(() => {
    const update = () => setRoute(parse(window.location.hash));
    window.addEventListener("hashchange", update);
    return () => window.removeEventListener("hashchange", update);
  }, []);
  return route;
}
