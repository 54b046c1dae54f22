/**
 * vitest globalSetup: the PostgreSQL server for every test file that needs one.
 *
 * With DATABASE_URL set, tests use that server. Otherwise a throwaway server is started (initdb
 * in a temp dir, as the `postgres` OS user when running as root, on a free port) and removed
 * after the run. Tests read the URL with `inject("postgresUrl")` and isolate themselves in
 * schemas of their own (test/helpers/postgres.ts).
 *
 * When neither is possible (no DATABASE_URL, no PostgreSQL installed), the other tests still
 * run: `postgresUrl` is empty and `postgresUnavailable` says why, for the PostgreSQL tests to
 * report.
 */
import type { TestProject } from "vitest/node";
import { findPostgresBin, startThrowawayPostgres, type ThrowawayPostgres } from "../helpers/postgres.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The PostgreSQL database tests use; "" when none is available. */
    postgresUrl: string;
    /** Why there is no PostgreSQL ("" when there is one). */
    postgresUnavailable: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env.DATABASE_URL;
  if (given) {
    project.provide("postgresUrl", given);
    project.provide("postgresUnavailable", "");
    return async () => {};
  }
  if ((await findPostgresBin()) === null) {
    project.provide("postgresUrl", "");
    project.provide("postgresUnavailable", "no PostgreSQL: set DATABASE_URL, or install a server under /usr/lib/postgresql (apt-get install postgresql-15)");
    return async () => {};
  }
  const server: ThrowawayPostgres = await startThrowawayPostgres();
  project.provide("postgresUrl", server.url);
  project.provide("postgresUnavailable", "");
  return () => server.stop();
}
