//! Choosing one AMI among the images the terms matched.
