package resolvers

import (
	"taskflow/auth"
	"taskflow/errs"
	"taskflow/graph/model"
	"taskflow/store"
)

// projectPatch converts updateProject's input: an absent field stays as it is, a
// null description clears it, and a null name is BAD_USER_INPUT (a project always
// has a name).
func projectPatch(in model.UpdateProjectInput) (store.ProjectPatch, error) {
	var p store.ProjectPatch
	if in.Name.IsSet() {
		if in.Name.Value() == nil {
			return p, errs.Errorf(errs.CodeBadUserInput, "name must not be null")
		}
		p.Name = in.Name.Value()
	}
	if in.Description.IsSet() {
		p.SetDescription = true
		p.Description = in.Description.Value()
	}
	return p, nil
}

// accounts returns the accounts service of the resolver.
func (r *Resolver) accounts() auth.Accounts {
	return auth.Accounts{DB: r.DB, Hasher: r.Hasher}
}

// webhookEndpointPatch turns updateWebhookEndpoint's input into a patch: an
// absent field stays, a null url is BAD_USER_INPUT, null actions are every
// action.
func webhookEndpointPatch(in model.UpdateWebhookEndpointInput) (store.WebhookEndpointPatch, error) {
	var p store.WebhookEndpointPatch
	if in.URL.IsSet() {
		if in.URL.Value() == nil {
			return p, errs.Errorf(errs.CodeBadUserInput, "url must not be null")
		}
		p.URL = in.URL.Value()
	}
	if in.Description.IsSet() {
		p.SetDescription = true
		p.Description = in.Description.Value()
	}
	if in.Actions.IsSet() {
		p.Actions = in.Actions.Value()
		if p.Actions == nil {
			p.Actions = []string{}
		}
	}
	return p, nil
}
