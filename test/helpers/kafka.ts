/** Moved to testkit/servers/kafka.ts (shared by tests, bench and chaos); this path stays for existing imports. */
export * from "../../testkit/servers/kafka.js";
