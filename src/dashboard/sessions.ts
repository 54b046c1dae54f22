/**
 * Dashboard sessions: logging in with an API key sets an HttpOnly, SameSite=Strict cookie that
 * stands for that key's principal, so the key itself never sits in the page (where a script
 * could read it) nor in a URL.
 *
 * Sessions live in this process's memory: a restart, or another instance behind a load
 * balancer, asks to log in again. That is the price of sessions that can be revoked (log out
 * deletes the entry) and that never outlive the key's scopes as configured at login.
 *
 * CSRF. The cookie is SameSite=Strict, so other sites' requests do not carry it. On top of that,
 * every request that changes something (any method but GET/HEAD/OPTIONS) authenticated by the
 * cookie must send the session's CSRF token in `X-CSRF-Token` (synchronizer token: the page
 * reads it from GET <ui>/api/session, which other origins cannot read), and, when the browser
 * sends `Origin` or `Sec-Fetch-Site`, they must say same origin.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { FastifyRequest } from "fastify";
import type { Principal } from "../http/auth.js";

export const SESSION_COOKIE = "conveyor_session";
export const CSRF_HEADER = "x-csrf-token";

export interface Session {
  id: string;
  principal: Principal;
  csrfToken: string;
  /** Ends this long after the last request, ms since epoch. */
  expiresAt: number;
}

export interface SessionOptions {
  /** A session ends after this long without a request, ms. Default 43 200 000 (12 h). */
  idleTimeoutMs?: number;
  /** Sessions kept at once; logging in beyond that ends the oldest. Default 10 000. */
  maxSessions?: number;
}

/** What the API's auth hook learns from a request's cookie. */
export type SessionCheck =
  | { kind: "none" }
  | { kind: "ok"; principal: Principal }
  | { kind: "refused"; status: 401 | 403; detail: string };

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

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

export class DashboardSessions {
  private readonly sessions = new Map<string, Session>();
  readonly idleTimeoutMs: number;
  private readonly maxSessions: number;

  constructor(options: SessionOptions = {}, private readonly clock: () => number = Date.now) {
    this.idleTimeoutMs = options.idleTimeoutMs ?? 12 * 60 * 60 * 1000;
    this.maxSessions = options.maxSessions ?? 10_000;
  }

  create(principal: Principal): Session {
    this.sweep();
    while (this.sessions.size >= this.maxSessions) {
      // Map keeps insertion order: the first entry is the oldest login.
      const oldest = this.sessions.keys().next().value;
      if (oldest === undefined) break;
      this.sessions.delete(oldest);
    }
    const session: Session = {
      id: randomBytes(32).toString("base64url"),
      principal,
      csrfToken: randomBytes(32).toString("base64url"),
      expiresAt: this.clock() + this.idleTimeoutMs,
    };
    this.sessions.set(session.id, session);
    return session;
  }

  /** The live session a request's cookie names (and extends it), or null. */
  find(request: FastifyRequest): Session | null {
    const id = readCookie(request.headers.cookie, SESSION_COOKIE);
    if (id === null) return null;
    const session = this.sessions.get(id);
    if (!session) return null;
    const now = this.clock();
    if (session.expiresAt <= now) {
      this.sessions.delete(id);
      return null;
    }
    session.expiresAt = now + this.idleTimeoutMs;
    return session;
  }

  destroy(id: string): void {
    this.sessions.delete(id);
  }

  /**
   * For the API's auth hook: the principal of a cookie-authenticated request, with the CSRF
   * checks of state-changing methods applied.
   */
  check(request: FastifyRequest): SessionCheck {
    if (readCookie(request.headers.cookie, SESSION_COOKIE) === null) return { kind: "none" };
    const session = this.find(request);
    if (!session) return { kind: "refused", status: 401, detail: "the dashboard session ended (logged out, expired, or the server restarted); log in again" };
    if (!SAFE_METHODS.has(request.method)) {
      const forged = crossSiteReason(request);
      if (forged) return { kind: "refused", status: 403, detail: `refused as a possible cross-site request forgery: ${forged}` };
      const token = request.headers[CSRF_HEADER];
      if (typeof token !== "string" || !sameToken(token, session.csrfToken)) {
        return { kind: "refused", status: 403, detail: `a change made with the dashboard's session cookie needs its CSRF token in ${CSRF_HEADER} (the dashboard page reads it from its api/session route)` };
      }
    }
    return { kind: "ok", principal: session.principal };
  }

  private sweep(): void {
    const now = this.clock();
    for (const [id, s] of this.sessions) if (s.expiresAt <= now) this.sessions.delete(id);
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
