/**
 * Dashboard sessions: logging in with an API key sets an HttpOnly, SameSite=Strict cookie that
 * stands for that key's principal, so the key itself never sits in the page (where a script
 * could read it) nor in a URL.
 *
 * The cookie is self-contained: an HMAC-SHA256-signed token carrying the key's id, the scopes it
 * had at login, a fingerprint of the key, a random nonce (the CSRF token is derived from it) and
 * its expiry. Any instance holding the same secret verifies it without shared state, so a
 * session survives restarts and works behind a load balancer. On every request the key must still
 * be configured under that id with the same key (a rotated key ends its sessions), and the
 * session's scopes are cut to the key's current ones.
 *
 * The secret: `sessions.secret`, else the CONVEYOR_DASHBOARD_SECRET environment variable, else a
 * random one per process (with a warning in the log: sessions then end at a restart and are
 * refused by other instances).
 *
 * CSRF. The cookie is SameSite=Strict, so other sites' requests do not carry it. On top of that,
 * every request that changes something (any method but GET/HEAD/OPTIONS) authenticated by the
 * cookie must send the session's CSRF token in `X-CSRF-Token` (synchronizer token: the page
 * reads it from GET <ui>/api/session, which other origins cannot read), and, when the browser
 * sends `Origin` or `Sec-Fetch-Site`, they must say same origin.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { InvalidInputError } from "../core/errors.js";
import { SCOPES, type KeyRing, type Principal, type Scope } from "../http/auth.js";

export const SESSION_COOKIE = "conveyor_session";
export const CSRF_HEADER = "x-csrf-token";
/** The environment variable read for the signing secret when `sessions.secret` is not given. */
export const SESSION_SECRET_ENV = "CONVEYOR_DASHBOARD_SECRET";

export interface Session {
  /** The cookie's value: the signed token. */
  token: string;
  principal: Principal;
  csrfToken: string;
  /** When the token stops being accepted, ms since epoch. */
  expiresAt: number;
}

export interface SessionOptions {
  /**
   * The secret that signs session cookies, at least 32 bytes; give every instance behind one
   * load balancer the same one (e.g. `openssl rand -base64 32`). Changing it ends every session.
   * Default: the CONVEYOR_DASHBOARD_SECRET environment variable, else a random secret per process
   * (logged as a warning: sessions then end at a restart and only work on the instance that made
   * them).
   */
  secret?: string | Buffer;
  /**
   * A session ends after this long without a request, ms (the cookie is renewed as it is used).
   * Default 43 200 000 (12 h).
   */
  idleTimeoutMs?: number;
  /** A session ends this long after logging in, however busy, ms. Default 604 800 000 (7 days). */
  maxLifetimeMs?: number;
}

/** What the API's auth hook learns from a request's cookie. */
export type SessionCheck =
  { kind: "none" } | { kind: "ok"; principal: Principal; session: Session; renewed: Session | null } | { kind: "refused"; status: 401 | 403; detail: string };

/** What a session token carries. */
interface SessionClaims {
  /** Key id. */
  k: string;
  /** Scopes at login. */
  s: Scope[];
  /** Fingerprint of the key (HMAC of its hash), to tell it from a later key under the same id. */
  f: string;
  /** Random nonce; the CSRF token is derived from it. */
  n: string;
  /** Login time, ms since epoch. */
  i: number;
  /** Expiry, ms since epoch. */
  e: number;
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
const TOKEN_VERSION = "s1";
/** A cookie longer than this is not ours (real tokens are about 300 characters). */
const MAX_TOKEN_LENGTH = 2048;
/** Logged-out sessions remembered per process (the oldest forgotten first). */
const MAX_LOGGED_OUT = 10_000;

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Reads one cookie from a Cookie header (RFC 6265 syntax; values are not decoded). */
export function readCookie(header: string | undefined, name: string): string | null {
  if (!header) return null;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

function isClaims(value: unknown): value is SessionClaims {
  if (typeof value !== "object" || value === null) return false;
  const c = value as Record<string, unknown>;
  return (
    typeof c.k === "string" &&
    Array.isArray(c.s) &&
    c.s.every((x) => SCOPES.includes(x as Scope)) &&
    typeof c.f === "string" &&
    typeof c.n === "string" &&
    typeof c.i === "number" &&
    typeof c.e === "number"
  );
}

type Verified = { ok: true; session: Session; claims: SessionClaims } | { ok: false; detail: string };

export class DashboardSessions {
  readonly idleTimeoutMs: number;
  readonly maxLifetimeMs: number;
  /** True when no secret was configured and this process made up its own. */
  readonly ephemeralSecret: boolean;
  private readonly secret: Buffer;
  /**
   * Nonces of sessions logged out on this process, with their expiry: refused here until then.
   * Other instances do not learn of a logout (nothing is shared); at most MAX_LOGGED_OUT kept.
   */
  private readonly loggedOut = new Map<string, number>();

  constructor(
    private readonly keyring: KeyRing | null,
    options: SessionOptions = {},
    private readonly clock: () => number = Date.now,
  ) {
    this.idleTimeoutMs = options.idleTimeoutMs ?? 12 * 60 * 60 * 1000;
    this.maxLifetimeMs = options.maxLifetimeMs ?? 7 * 24 * 60 * 60 * 1000;
    for (const [name, v] of [
      ["idleTimeoutMs", this.idleTimeoutMs],
      ["maxLifetimeMs", this.maxLifetimeMs],
    ] as const) {
      if (!Number.isSafeInteger(v) || v <= 0) throw new InvalidInputError(`dashboard.sessions.${name} must be a positive whole number of ms; got ${String(v)}`);
    }
    const configured = options.secret ?? (process.env[SESSION_SECRET_ENV] || undefined);
    if (configured === undefined) {
      this.secret = randomBytes(32);
      this.ephemeralSecret = true;
    } else {
      this.secret = typeof configured === "string" ? Buffer.from(configured, "utf8") : configured;
      this.ephemeralSecret = false;
      if (this.secret.length < 32) {
        throw new InvalidInputError(
          `dashboard.sessions.secret (or ${SESSION_SECRET_ENV}) must be at least 32 bytes; generate one with: openssl rand -base64 32`,
        );
      }
    }
  }

  /** A new session for a principal that just presented its key. */
  create(principal: Principal): Session {
    const now = this.clock();
    const claims: SessionClaims = {
      k: principal.id,
      s: [...principal.scopes].sort(),
      f: this.keyFingerprint(principal.id) ?? "",
      n: randomBytes(18).toString("base64url"),
      i: now,
      e: Math.min(now + this.idleTimeoutMs, now + this.maxLifetimeMs),
    };
    return this.seal(claims, principal);
  }

  /** The valid session a request's cookie carries, or null. */
  find(request: FastifyRequest): Session | null {
    const token = readCookie(request.headers.cookie, SESSION_COOKIE);
    if (token === null) return null;
    const v = this.verify(token);
    return v.ok ? v.session : null;
  }

  /**
   * The same session with its idle expiry pushed out, once a quarter of the idle timeout has
   * passed since it was last renewed (so not every request sets a cookie), or null.
   */
  renew(session: Session): Session | null {
    const v = this.verify(session.token);
    if (!v.ok) return null;
    const now = this.clock();
    const { claims } = v;
    const next = Math.min(now + this.idleTimeoutMs, claims.i + this.maxLifetimeMs);
    if (next - claims.e < this.idleTimeoutMs / 4) return null;
    return this.seal({ ...claims, e: next }, session.principal);
  }

  /** Logs a session out: this process refuses its token from now until it would have expired. */
  end(session: Session): void {
    const v = this.verify(session.token);
    if (!v.ok) return;
    const now = this.clock();
    for (const [nonce, expiresAt] of this.loggedOut) if (expiresAt <= now) this.loggedOut.delete(nonce);
    while (this.loggedOut.size >= MAX_LOGGED_OUT) {
      const oldest = this.loggedOut.keys().next().value;
      if (oldest === undefined) break;
      this.loggedOut.delete(oldest);
    }
    this.loggedOut.set(v.claims.n, v.claims.e);
  }

  /** The Set-Cookie value for a session (or, with null, one that clears it). */
  cookie(session: Session | null, secure: boolean): string {
    const flags = `Path=/; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}`;
    if (!session) return `${SESSION_COOKIE}=; ${flags}; Max-Age=0`;
    const maxAge = Math.max(0, Math.ceil((session.expiresAt - this.clock()) / 1000));
    return `${SESSION_COOKIE}=${session.token}; ${flags}; Max-Age=${maxAge}`;
  }

  /**
   * For the API's auth hook: the principal of a cookie-authenticated request, with the CSRF
   * checks of state-changing methods applied.
   */
  check(request: FastifyRequest): SessionCheck {
    const token = readCookie(request.headers.cookie, SESSION_COOKIE);
    if (token === null) return { kind: "none" };
    const v = this.verify(token);
    if (!v.ok) return { kind: "refused", status: 401, detail: v.detail };
    if (!SAFE_METHODS.has(request.method)) {
      const forged = crossSiteReason(request);
      if (forged) return { kind: "refused", status: 403, detail: `refused as a possible cross-site request forgery: ${forged}` };
      const csrf = request.headers[CSRF_HEADER];
      if (typeof csrf !== "string" || !sameToken(csrf, v.session.csrfToken)) {
        return {
          kind: "refused",
          status: 403,
          detail: `a change made with the dashboard's session cookie needs its CSRF token in ${CSRF_HEADER} (the dashboard page reads it from its api/session route)`,
        };
      }
    }
    return { kind: "ok", principal: v.session.principal, session: v.session, renewed: this.renew(v.session) };
  }

  private verify(token: string): Verified {
    const again = "log in to the dashboard again";
    const parts = token.length <= MAX_TOKEN_LENGTH ? token.split(".") : [];
    if (parts.length !== 3 || parts[0] !== TOKEN_VERSION) return { ok: false, detail: `the dashboard session cookie is malformed; ${again}` };
    const [, body, signature] = parts as [string, string, string];
    if (!sameToken(signature, this.sign(body))) {
      return {
        ok: false,
        detail: `the dashboard session cookie was not signed by this server's secret (altered, or made with another dashboard.sessions.secret); ${again}`,
      };
    }
    let claims: unknown;
    try {
      claims = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
    } catch {
      claims = null;
    }
    if (!isClaims(claims)) return { ok: false, detail: `the dashboard session cookie is malformed; ${again}` };
    if (claims.e <= this.clock()) return { ok: false, detail: `the dashboard session expired; ${again}` };
    if (this.loggedOut.has(claims.n)) return { ok: false, detail: `this dashboard session was logged out; ${again}` };
    const current = this.keyring?.scopesOf(claims.k) ?? null;
    const fingerprint = this.keyFingerprint(claims.k);
    if (current === null || fingerprint === null || !sameToken(fingerprint, claims.f)) {
      return {
        ok: false,
        detail: `the API key "${claims.k.slice(0, 64)}" this session was made with is no longer configured (revoked or replaced); ${again} with a valid key`,
      };
    }
    // The scopes granted at login, cut to what the key may do now.
    const scopes = new Set<Scope>(claims.s.filter((s) => current.has(s)));
    if (scopes.size === 0) return { ok: false, detail: `the API key "${claims.k.slice(0, 64)}" no longer has any of this session's scopes; ${again}` };
    return { ok: true, claims, session: this.seal(claims, { id: claims.k, scopes }, token) };
  }

  private seal(claims: SessionClaims, principal: Principal, token?: string): Session {
    let value = token;
    if (value === undefined) {
      const body = Buffer.from(JSON.stringify(claims), "utf8").toString("base64url");
      value = `${TOKEN_VERSION}.${body}.${this.sign(body)}`;
    }
    return { token: value, principal, csrfToken: this.mac(`csrf.${claims.n}`), expiresAt: claims.e };
  }

  private keyFingerprint(id: string): string | null {
    const hash = this.keyring?.keyHashOf(id);
    return hash ? this.mac(`key.${hash.toString("hex")}`).slice(0, 22) : null;
  }

  private sign(body: string): string {
    return this.mac(`token.${body}`);
  }

  private mac(what: string): string {
    return createHmac("sha256", this.secret).update(`conveyor-dashboard-session.${what}`).digest("base64url");
  }
}

/** Why a request looks cross-site (Origin or Sec-Fetch-Site say so), or null. */
export function crossSiteReason(request: FastifyRequest): string | null {
  const site = request.headers["sec-fetch-site"];
  if (typeof site === "string" && site !== "same-origin" && site !== "none") return `Sec-Fetch-Site is ${site}`;
  const origin = request.headers.origin;
  if (typeof origin === "string") {
    const expected = `${request.protocol}://${request.host}`;
    if (origin !== expected) return `Origin ${origin.slice(0, 100)} is not ${expected}`;
  }
  return null;
}
