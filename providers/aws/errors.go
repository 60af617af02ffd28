package aws

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/hamaster/hamaster/errkind"
)

// errorKinds maps AWS error codes onto the project's error kinds.
var errorKinds = map[string]error{
	"InvalidInstanceID.NotFound":         errkind.NotFound,
	"InvalidInstanceID.Malformed":        errkind.InvalidArgument,
	"InvalidAllocationID.NotFound":       errkind.NotFound,
	"InvalidAssociationID.NotFound":      errkind.NotFound,
	"InvalidVolume.NotFound":             errkind.NotFound,
	"InvalidSubnetID.NotFound":           errkind.NotFound,
	"LoadBalancerNotFound":               errkind.NotFound,
	"TargetGroupNotFound":                errkind.NotFound,
	"ListenerNotFound":                   errkind.NotFound,
	"NoSuchHostedZone":                   errkind.NotFound,
	"NoSuchChange":                       errkind.NotFound,
	"DuplicateLoadBalancerName":          errkind.AlreadyExists,
	"DuplicateTargetGroupName":           errkind.AlreadyExists,
	"DuplicateListener":                  errkind.AlreadyExists,
	"InvalidIPAddress.InUse":             errkind.AlreadyExists,
	"Resource.AlreadyAssociated":         errkind.FailedPrecondition,
	"ResourceInUse":                      errkind.FailedPrecondition,
	"IncorrectState":                     errkind.FailedPrecondition,
	"IncorrectInstanceState":             errkind.FailedPrecondition,
	"VolumeInUse":                        errkind.FailedPrecondition,
	"InvalidVolume.ZoneMismatch":         errkind.InvalidArgument,
	"UnauthorizedOperation":              errkind.FailedPrecondition,
	"AccessDenied":                       errkind.FailedPrecondition,
	"InvalidParameterValue":              errkind.InvalidArgument,
	"InvalidParameterCombination":        errkind.InvalidArgument,
	"ValidationError":                    errkind.InvalidArgument,
	"InvalidChangeBatch":                 errkind.FailedPrecondition,
	"RequestLimitExceeded":               errkind.Unavailable,
	"Throttling":                         errkind.Unavailable,
	"ThrottlingException":                errkind.Unavailable,
	"PriorRequestNotComplete":            errkind.Unavailable,
	"ServiceUnavailable":                 errkind.Unavailable,
	"InternalError":                      errkind.Unavailable,
	"InsufficientInstanceCapacity":       errkind.Unavailable,
	"InsufficientAddressCapacity":        errkind.Unavailable,
	"InvalidInstanceID":                  errkind.FailedPrecondition,
	"OperationNotPermitted":              errkind.FailedPrecondition,
	"InvalidTarget":                      errkind.NotFound,
	"InvalidConfigurationRequest":        errkind.InvalidArgument,
	"TooManyLoadBalancers":               errkind.FailedPrecondition,
	"AddressLimitExceeded":               errkind.FailedPrecondition,
	"InvalidAddress.NotFound":            errkind.NotFound,
	"InvalidNetworkInterfaceID.NotFound": errkind.NotFound,
}

// code is the AWS error code of err ("" if none).
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// mapErr wraps err with what was being done and marks it with its kind:
// the error code's kind, else Unavailable for a 5xx or an exhausted
// retryer, else unmarked.
func mapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf(format+": %w", append(args, err)...)
	if k, ok := errorKinds[code(err)]; ok {
		return errkind.Mark(k, wrapped)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return errkind.Mark(errkind.Unavailable, wrapped)
	}
	var me *retry.MaxAttemptsError
	if errors.As(err, &me) {
		return errkind.Mark(errkind.Unavailable, wrapped)
	}
	return wrapped
}
