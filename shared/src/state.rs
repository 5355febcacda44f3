//! Pool state as recorded in DynamoDB: desired AMI, history, errors.
