/** Moved to testkit/servers/postgres-standby.ts (shared by tests, bench and chaos); this path stays for existing imports. */
export * from "../../testkit/servers/postgres-standby.js";
