package graphqlapi

import (
	"encoding/json"

	"github.com/graph-gophers/graphql-go"
)

// RunPod's cloud-only operations: the Hub (listings) and the model
// repository. The schema declares their types so the clients' documents
// validate (runpodctl's `hub list` sends `query Listings($input:
// ListingsInput!)`), and each resolver answers with its own refusal.

const (
	noHub    = "the RunPod Hub is not available on Berth (it is RunPod's catalogue of repositories); create a template with the image and an endpoint or pod from it"
	noModels = "model repositories are not available on Berth (RunPod's cloud stores them); put the model in the image or on a network volume"
)

// JSON is the JSON scalar (model metadata): any value.
type JSON struct{ v any }

// ImplementsGraphQLType implements graphql-go's custom scalar.
func (JSON) ImplementsGraphQLType(name string) bool { return name == "JSON" }

// UnmarshalGraphQL keeps the value as given.
func (j *JSON) UnmarshalGraphQL(input any) error { j.v = input; return nil }

// MarshalJSON writes the value.
func (j JSON) MarshalJSON() ([]byte, error) { return json.Marshal(j.v) }

type listingView struct {
	ID, RepoName, RepoOwner, Type, CreatedAt, UpdatedAt        string
	Title, RepoOwnerAvatarUrl, Description, Category, Language *string
	Tags                                                       *[]string
	Stars, Views, Deploys, OpenIssues, Watchers                int32
	ListedRelease                                              *hubReleaseView
}

type hubReleaseView struct {
	ID                                                    string
	Name, TagName, Body, Readme, Branch, License, Config  *string
	IconUrl, AuthorName, CreatedAt, ReleasedAt, UpdatedAt *string
	Tests                                                 *string
	Deploys                                               int32
	Build                                                 *struct{ ImageName *string }
}

type modelView struct {
	ID, Name                                      string
	Owner, Provider, Status, CreatedAt, UpdatedAt *string
	Users                                         *[]modelUserView
	Versions                                      *[]modelVersionView
}

type modelUserView struct {
	UserId, CredentialType, CredentialReference, Status, UpdatedAt *string
}

type modelVersionView struct {
	Uuid, Hash                   *graphql.ID
	Status, CreatedAt, UpdatedAt *string
	Metadata                     *JSON
}

type modelResult struct {
	Success bool
	Message *string
	Model   *modelView
}

type uploadResult struct {
	Success bool
	Message *string
	Upload  *struct {
		SessionId, Status, UploadId, Bucket, Key, KeyPrefix, PartSizeBytes, CompleteUrl, AbortUrl *string
		PartCount, ExpiresInSeconds                                                               *int32
		Parts                                                                                     *[]struct {
			PartNumber     *int32
			Url, ExpiresAt *string
		}
	}
	Model   *modelView
	Version *modelVersionView
}

type completeUploadResult struct {
	Success                    bool
	Message, SessionId, Status *string
}

type versionStatusResult struct {
	Success      bool
	Message      *string
	ModelVersion *modelVersionView
}

type modelRepoInput struct {
	Owner, Name, Provider, CredentialType, CredentialReference, ModelStatus *string
	ModelVersionUuid, FileName, FileSizeBytes, PartSizeBytes, ContentType   *string
	Metadata                                                                *JSON
}

func (r *resolver) Listings(args struct {
	Input *struct {
		SearchQuery, Category, OrderBy, OrderDirection, Owner *string
		Limit, Offset                                         *int32
	}
}) ([]listingView, error) {
	return nil, unsupported("listings", "listings: %s", noHub)
}

func (r *resolver) Listing(args struct{ ID *string }) (*listingView, error) {
	return nil, unsupported("listing", "listing: %s", noHub)
}

func (r *resolver) ListingFromRepo(args struct{ RepoOwner, RepoName *string }) (*listingView, error) {
	return nil, unsupported("listingFromRepo", "listingFromRepo: %s", noHub)
}

func (r *resolver) MyModels() ([]modelView, error) {
	return nil, unsupported("myModels", "myModels: %s", noModels)
}

func (r *resolver) MyModel(args struct{ Owner, Name *string }) (*modelView, error) {
	return nil, unsupported("myModel", "myModel: %s", noModels)
}

func (r *resolver) AddModelToRepo(args struct{ Input *modelRepoInput }) (*modelResult, error) {
	return nil, unsupported("addModelToRepo", "addModelToRepo: %s", noModels)
}

func (r *resolver) RemoveModelFromRepo(args struct {
	Input *struct{ Owner, Name *string }
}) (*modelResult, error) {
	return nil, unsupported("removeModelFromRepo", "removeModelFromRepo: %s", noModels)
}

func (r *resolver) CreateModelRepoUpload(args struct{ Input *modelRepoInput }) (*uploadResult, error) {
	return nil, unsupported("createModelRepoUpload", "createModelRepoUpload: %s", noModels)
}

func (r *resolver) CompleteModelRepoUpload(args struct{ Input *struct{ SessionId *string } }) (*completeUploadResult, error) {
	return nil, unsupported("completeModelRepoUpload", "completeModelRepoUpload: %s", noModels)
}

func (r *resolver) UpdateModelVersionStatus(args struct {
	Uuid, Hash *graphql.ID
	Status     *string
}) (*versionStatusResult, error) {
	return nil, unsupported("updateModelVersionStatus", "updateModelVersionStatus: %s", noModels)
}
