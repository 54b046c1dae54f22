import { postgresConformance } from "../helpers/postgres-suite.js";

postgresConformance("postgres");
