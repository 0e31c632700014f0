// Version 1 of the deploy agents (deploy.ts).
import { deployAgents } from "./deploy.ts";

export default deployAgents(1);
