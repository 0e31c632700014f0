// Version 2 of the deploy agents (deploy.ts) before the rename is declared: the replay check lists it.
import { deployAgents } from "./deploy.ts";

export default deployAgents(2, { replaced: false });
