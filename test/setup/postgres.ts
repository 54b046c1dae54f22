/**
 * vitest globalSetup: the PostgreSQL server for every test file that needs one.
 *
 * With DATABASE_URL set, tests use that server. Otherwise a throwaway server is started (initdb
 * in a temp dir, as the `postgres` OS user when running as root, on a free port) and removed
 * after the run. Tests read the URL with `inject("postgresUrl")` and isolate themselves in
 * schemas of their own (testkit/servers/postgres.ts).
 *
 * When neither is possible (no DATABASE_URL, no PostgreSQL installed), the other tests still
 * run: `postgresUrl` is empty and `postgresUnavailable` says why, for the PostgreSQL tests to
 * report.
 */
import type { TestProject } from "vitest/node";
import { findPostgresBin, startThrowawayPostgres } from "../../testkit/servers/postgres.js";
import { provideSharedServer } from "./shared-server.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The PostgreSQL database tests use; "" when none is available. */
    postgresUrl: string;
    /** Why there is no PostgreSQL ("" when there is one). */
    postgresUnavailable: string;
  }
}

export default function setup(project: TestProject): Promise<() => Promise<void>> {
  return provideSharedServer(project, {
    envVar: "DATABASE_URL",
    urlKey: "postgresUrl",
    unavailableKey: "postgresUnavailable",
    installed: async () => (await findPostgresBin()) !== null,
    missing: "no PostgreSQL: set DATABASE_URL, or install a server under /usr/lib/postgresql (apt-get install postgresql-15)",
    start: () => startThrowawayPostgres(),
  });
}
