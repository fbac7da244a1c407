#!/bin/bash
echo ok
