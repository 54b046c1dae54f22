/** The Conveyor dashboard: login, navigation, and the views. */
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, call, currentSession, setSession, type SessionInfo } from "./api";
import { DeadPage } from "./dead";
import { JobPage } from "./job";
import { OverviewPage } from "./overview";
import { QueuePage } from "./queue";
import { RelayPage } from "./relay";
import { SchedulesPage } from "./schedules";
import { useRoute, type Route } from "./router";
import { Notice } from "./widgets";

function Login({ onDone }: { onDone: () => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await call("POST", "api/login", { key }, true);
      setKey("");
      onDone();
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main id="main" class="login">
      <h1>Conveyor</h1>
      <form onSubmit={(e) => void submit(e)}>
        <label for="api-key">API key</label>
        <input id="api-key" type="password" autoComplete="off" value={key} onInput={(e) => setKey(e.currentTarget.value)} required autoFocus />
        <p class="hint">
          A read key shows queues and jobs; an admin key can also pause, cancel and replay. The key stays on the server side: the browser keeps only a session
          cookie.
        </p>
        <button type="submit" class="btn btn-primary" disabled={busy}>
          {busy ? "Logging in…" : "Log in"}
        </button>
        {error && <Notice kind="error">{error}</Notice>}
      </form>
    </main>
  );
}

function View({ route }: { route: Route }) {
  switch (route.view) {
    case "overview":
      return <OverviewPage />;
    case "queue":
      return <QueuePage queue={route.queue} params={route.params} />;
    case "dead":
      return <DeadPage queue={route.queue} params={route.params} />;
    case "job":
      return <JobPage id={route.id} />;
    case "schedules":
      return currentSession()?.sections.schedules ? <SchedulesPage /> : <Notice kind="error">This server's store keeps no schedules.</Notice>;
    case "relay":
      return currentSession()?.sections.relay ? <RelayPage /> : <Notice kind="error">This server reports on no outbox (conveyor serve --outbox).</Notice>;
    case "missing":
      return <Notice kind="error">No such page. Go back to the queues.</Notice>;
  }
}

function titleOf(route: Route): string {
  switch (route.view) {
    case "overview":
      return "Queues";
    case "queue":
      return `Queue ${route.queue}`;
    case "dead":
      return `Dead letters of ${route.queue}`;
    case "job":
      return `Job ${route.id}`;
    case "schedules":
      return "Schedules";
    case "relay":
      return "Relay";
    case "missing":
      return "Not found";
  }
}

function App() {
  const [session, setLocal] = useState<SessionInfo | null>(null);
  const [error, setError] = useState<string | null>(null);
  const route = useRoute();
  const main = useRef<HTMLElement>(null);
  const load = async () => {
    try {
      const s = await call<SessionInfo>("GET", "api/session", undefined, true);
      setSession(s);
      setLocal(s);
    } catch (e) {
      setError(String(e));
    }
  };
  useEffect(() => void load(), []);
  useEffect(() => {
    document.title = `${titleOf(route)} · Conveyor`;
    // Move focus to the new page's content, so keyboard and screen reader users start there.
    main.current?.focus();
  }, [route]);
  if (error) return <Notice kind="error">{error}</Notice>;
  if (!session) return <p>Loading…</p>;
  if (!session.principal) return <Login onDone={() => void load()} />;
  const logout = async () => {
    await call("POST", "api/logout", undefined, true);
    setSession(null);
    await load();
  };
  const who = currentSession()?.principal;
  return (
    <>
      <a
        class="skip"
        href="#main"
        onClick={(e) => {
          e.preventDefault();
          main.current?.focus();
        }}
      >
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="#/">
          Conveyor
        </a>
        <nav aria-label="Sections">
          <a href="#/" aria-current={route.view === "overview" ? "page" : undefined}>
            Queues
          </a>
          {session.sections.schedules && (
            <a href="#/schedules" aria-current={route.view === "schedules" ? "page" : undefined}>
              Schedules
            </a>
          )}
          {session.sections.relay && (
            <a href="#/relay" aria-current={route.view === "relay" ? "page" : undefined}>
              Relay
            </a>
          )}
        </nav>
        <span class="spacer" />
        {who && (
          <span class="who">
            {who.id} <span class="dim">({who.scopes.includes("admin") ? "admin" : who.scopes.join(", ")})</span>
          </span>
        )}
        {session.authRequired && (
          <button type="button" class="btn" onClick={() => void logout()}>
            Log out
          </button>
        )}
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        {session.principal.scopes.includes("read") ? (
          <View route={route} />
        ) : (
          <Notice kind="error">
            The key {session.principal.id} has no read scope, and the dashboard shows nothing without it. Log out and log in with a read or admin key.
          </Notice>
        )}
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
