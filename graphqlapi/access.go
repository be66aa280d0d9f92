package graphqlapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	gqlerrors "github.com/graph-gophers/graphql-go/errors"

	"berth/mgmt"
	"berth/store"
)

// API keys in GraphQL: every field of Query, Mutation and User (what
// myself holds) has a rule here, checked against the request's key
// before anything runs (a refused field refuses the request, naming it);
// the mutations on one endpoint check its grant in their resolvers
// (allowEndpoint), with the id they are given. TestEveryRootFieldHasARule
// fails for a field without one.

type fieldRule struct {
	scope mgmt.Scope
	need  mgmt.Need
	// endpoint: a mutation on one endpoint: any key that may write some
	// endpoint passes here, and the resolver checks the endpoint's grant.
	endpoint bool
}

var (
	anyKey       = fieldRule{scope: mgmt.ScopeFields, need: mgmt.Read}
	accountRead  = fieldRule{scope: mgmt.ScopeAccount, need: mgmt.Read}
	accountWrite = fieldRule{scope: mgmt.ScopeAccount, need: mgmt.Write}
	endpointList = fieldRule{scope: mgmt.ScopeEndpointList, need: mgmt.Read}
	endpointMut  = fieldRule{scope: mgmt.ScopeEndpoint, need: mgmt.Write, endpoint: true}
)

// fieldRules maps "Type.field" to its rule.
var fieldRules = map[string]fieldRule{
	"Query.myself": anyKey,
	"Query.pod":    accountRead, "Query.gpuTypes": accountRead, "Query.podTemplates": accountRead, "Query.podTemplate": accountRead,
	"Query.serverlessGpuPools": accountRead, "Query.dataCenters": accountRead, "Query.listings": accountRead,
	"Query.listing": accountRead, "Query.listingFromRepo": accountRead, "Query.myModels": accountRead, "Query.myModel": accountRead,

	"User.id": anyKey, "User.email": anyKey, "User.endpoints": endpointList, // filtered to the key's endpoints
	"User.pubKey": accountRead, "User.clientBalance": accountRead, "User.currentSpendPerHr": accountRead, "User.spendLimit": accountRead,
	"User.notifyPodsStale": accountRead, "User.notifyPodsGeneral": accountRead, "User.notifyLowBalance": accountRead,
	"User.pods": accountRead, "User.networkVolumes": accountRead, "User.podTemplates": accountRead,
	"User.containerRegistryCreds": accountRead, "User.serverlessDiscount": accountRead,

	"Mutation.saveEndpoint": endpointMut, "Mutation.updateEndpointTemplate": endpointMut, "Mutation.deleteEndpoint": endpointMut,
	"Mutation.saveTemplate": accountWrite, "Mutation.deleteTemplate": accountWrite,
	"Mutation.saveRegistryAuth": accountWrite, "Mutation.updateRegistryAuth": accountWrite, "Mutation.deleteRegistryAuth": accountWrite,
	"Mutation.podFindAndDeployOnDemand": accountWrite, "Mutation.deployCpuPod": accountWrite, "Mutation.podStop": accountWrite,
	"Mutation.podResume": accountWrite, "Mutation.podTerminate": accountWrite, "Mutation.updateUserSettings": accountWrite,
	"Mutation.podRentInterruptable": accountWrite, "Mutation.podBidResume": accountWrite,
	"Mutation.addModelToRepo": accountWrite, "Mutation.removeModelFromRepo": accountWrite, "Mutation.createModelRepoUpload": accountWrite,
	"Mutation.completeModelRepoUpload": accountWrite, "Mutation.updateModelVersionStatus": accountWrite,
}

// ruledTypes are the types whose every field needs a rule.
var ruledTypes = []string{"Query", "Mutation", "User"}

// checkFields refuses a document selecting a field the request's key may
// not reach; without a key (a Handler served outside httpapi, in tests)
// nothing is checked.
func checkFields(ctx context.Context, shape *schemaShape, touched map[string]bool) *gqlerrors.QueryError {
	p := mgmt.PrincipalFrom(ctx)
	if p == nil {
		return nil
	}
	names := make([]string, 0, len(touched))
	for n := range touched {
		names = append(names, n)
	}
	slices.Sort(names) // the first refusal named is the same each time
	for _, n := range names {
		typ := n[:indexDot(n)]
		if _, known := shape.fields[typ][n[indexDot(n)+1:]]; !known || !slices.Contains(ruledTypes, typ) {
			continue // an unknown field: graphql-go's validation refuses it, saying why
		}
		rule, ok := fieldRules[n]
		if !ok {
			return forbiddenErr(fmt.Sprintf("no access rule for %s: Berth refuses fields without one", n))
		}
		what := fieldWhat(n)
		if rule.endpoint {
			if !p.CanWriteAny() {
				return forbiddenErr(mgmt.Access(p, mgmt.ScopeEndpointList, "", mgmt.Write, what).Error())
			}
			continue
		}
		if err := mgmt.Access(p, rule.scope, "", rule.need, what); err != nil {
			return forbiddenErr(err.Error())
		}
	}
	return nil
}

func indexDot(s string) int {
	for i := range s {
		if s[i] == '.' {
			return i
		}
	}
	return len(s)
}

// fieldWhat names a field for a message: "mutation saveTemplate",
// "query myself { pods }".
func fieldWhat(n string) string {
	typ, f := n[:indexDot(n)], n[indexDot(n)+1:]
	switch typ {
	case "Mutation":
		return "mutation " + f
	case "Query":
		return "query " + f
	case "User":
		return "myself { " + f + " }"
	}
	return n
}

func forbiddenErr(msg string) *gqlerrors.QueryError {
	return &gqlerrors.QueryError{Message: msg, Extensions: map[string]any{"code": "FORBIDDEN"}}
}

// allowEndpoint checks a mutation on one endpoint (id "" creates one).
func allowEndpoint(ctx context.Context, id, mutation string) error {
	p := mgmt.PrincipalFrom(ctx)
	if p == nil {
		return nil
	}
	var err error
	if id == "" {
		err = mgmt.Access(p, mgmt.ScopeEndpointList, "", mgmt.Write, "mutation "+mutation)
	} else {
		err = mgmt.Access(p, mgmt.ScopeEndpoint, id, mgmt.Write, "mutation "+mutation)
	}
	return wrap(err)
}

// auditMutations records a document's mutations: one entry per mutation
// field, with the id of what it returned and the first error.
func (h *Handler) auditMutations(ctx context.Context, touched map[string]bool, data json.RawMessage, errs []*gqlerrors.QueryError) {
	p := mgmt.PrincipalFrom(ctx)
	if p == nil || h.mg == nil {
		return
	}
	var out map[string]json.RawMessage
	json.Unmarshal(data, &out)
	status, msg := 200, ""
	if len(errs) > 0 {
		status, msg = 400, errs[0].Message
		if c, _ := errs[0].Extensions["code"].(string); c == "FORBIDDEN" {
			status = 403
		}
	}
	for n := range touched {
		if typ := n[:indexDot(n)]; typ != "Mutation" {
			continue
		}
		f := n[indexDot(n)+1:]
		var v struct {
			ID string `json:"id"`
		}
		json.Unmarshal(out[f], &v)
		h.mg.Audit(store.AuditEntry{KeyID: p.KeyID, Key: p.Name, Action: "graphql mutation " + f, Object: v.ID, Status: status, Error: msg})
	}
}
