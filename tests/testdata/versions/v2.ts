// Version 2 of the deploy agents (deploy.ts): create_record replaces create_dns_record.
import { deployAgents } from "./deploy.ts";

export default deployAgents(2);
