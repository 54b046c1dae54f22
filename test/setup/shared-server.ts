/**
 * What every vitest globalSetup of a shared server does (test/setup/<store>.ts): the server
 * named by an environment variable when set; otherwise a throwaway one (testkit/servers) when its
 * binary is installed, stopped after the run; otherwise none, and why, so the other tests still
 * run and this store's tests report the reason. Tests read both with `inject(...)`.
 */
import type { ProvidedContext } from "vitest";
import type { TestProject } from "vitest/node";

/** The ProvidedContext keys of one store: its URL and the reason it has none. */
type StringKey = { [K in keyof ProvidedContext]: ProvidedContext[K] extends string ? K : never }[keyof ProvidedContext];

export interface SharedServerOptions {
  /** Environment variable naming an existing server (DATABASE_URL, REDIS_URL …). */
  envVar: string;
  /** Where tests find the URL ("" when there is none). */
  urlKey: StringKey;
  /** Where tests find why there is no server ("" when there is one). */
  unavailableKey: StringKey;
  /** Whether a throwaway server can be started here (its binary is installed). */
  installed: () => boolean | Promise<boolean>;
  /** The reason given when it cannot, saying how to fix it. */
  missing: string;
  /** Starts the throwaway server. */
  start: () => Promise<{ url: string; stop(): Promise<void> }>;
}

/** Provides the server's URL (or the reason there is none) and returns the teardown. */
export async function provideSharedServer(project: TestProject, options: SharedServerOptions): Promise<() => Promise<void>> {
  const provide = (url: string, unavailable: string) => {
    project.provide(options.urlKey, url);
    project.provide(options.unavailableKey, unavailable);
  };
  const given = process.env[options.envVar];
  if (given) {
    provide(given, "");
    return async () => {};
  }
  if (!(await options.installed())) {
    provide("", options.missing);
    return async () => {};
  }
  const server = await options.start();
  provide(server.url, "");
  return () => server.stop();
}
