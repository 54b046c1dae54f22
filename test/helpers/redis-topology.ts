/** Moved to testkit/servers/redis-topology.ts (shared by tests, bench and chaos); this path stays for existing imports. */
export * from "../../testkit/servers/redis-topology.js";
